"""`kscience` on the command line: `main.py` (the parser and the entry point) and one module per
group of commands: `problem_commands.py`, `run_commands.py` (with `progress.py`, the live lines of a
run), `campaign_commands.py` and `worker_command.py`.
"""
