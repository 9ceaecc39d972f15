"""Trackio, local and remote.

db.py             where local databases are, their tables, each project's newest run
                  (sqlite3 only: what the CLI checks before the first frame); rows
                  fetched in one step (`fetch_all`)
local.py          a local project's SQLite database, followed by id
local_preview.py  its preview: each run's newest rows first, then the whole run's shape
local_extras.py   its system metrics and alerts
local_read.py     reading blocks of rows into columns, in helper processes for a long history
address.py        what --trackio names: the server's URL, loopback and Hub hosts (stdlib
                  only: checked before the first frame)
remote.py         a remote Trackio server (a Space or self-hosted), followed by id
remote_http.py    requests to the server, and what their failures mean
remote_sql.py     the project on the server as SQL: the transport the remote source owns
remote_rows.py    rows of a reply as points, run by run
remote_preview.py the remote preview pass, newest first
remote_extras.py  the remote system metrics and alerts
remote_logs.py    servers without `query_project`: whole logs through `get_logs`
newest_first.py   the preview of a long history, shared by both
system_tables.py  system metrics and alerts as events, shared by both
"""
