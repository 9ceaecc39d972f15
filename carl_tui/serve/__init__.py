"""`carl-tui serve`: the dashboard in web browsers (extra `serve`: textual-serve).

command.py the command: its options, the dashboard options checked before anything is
           served, the demo's one training shared by every visitor
server.py  textual-serve's server with a door (a random token), a limit on sessions, and one
           dashboard process per browser tab that ends with its tab and with the server
"""
