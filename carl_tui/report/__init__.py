"""`carl-tui summary` and `carl-tui export`: the dashboard's numbers without a screen.

They drive the same sources and store as the dashboard (`collect`), so what
they print is what the screen shows.
"""
