"""Looking at runs outside a notebook: `kscience show RUN --html FILE` (the run as one page), `kscience serve
[DB]` (every run of a database in a browser, over HTTP on this machine, as optuna-dashboard serves a study)
and `kscience figures RUN_OR_CAMPAIGN -o DIR` (the report figures as PNG files).

The pages and figures are the notebook's own (kscience.jupyter.export), which needs matplotlib (the
jupyter extra); all three only read the database.
"""

from __future__ import annotations

import shlex
import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from kscience.record.store import DEFAULT_DB, StoreError, default_db, open_store
from kscience.run.config import add_db_option
from kscience.usage import UsageError

DEFAULT_PORT = 8080  # optuna-dashboard's
LOCAL = "127.0.0.1"


def _export():
    """The notebook side's pages and figures, or a usage error that says what to install."""
    try:
        from kscience.jupyter import export
    except ImportError as exc:
        raise UsageError(f"pages and figures need matplotlib ({exc.name} is missing): "
                         "pip install 'kscience[jupyter]'") from None
    return export


def _store(db: str | None):
    try:
        return open_store(db, create=False, readonly=True)
    except StoreError as exc:
        raise UsageError(str(exc)) from None


def write_run_html(db: str | None, run_id: str, path: str) -> None:
    export = _export()
    with _store(db) as store:
        try:
            page = export.run_page(store, run_id)
        except StoreError as exc:
            raise UsageError(str(exc)) from None
    target = Path(path).expanduser()
    try:
        target.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror}") from None
    print(f"kscience: run {run_id} written to {target} ({len(page.encode()) // 1024} KB, opens in any browser)",
          file=sys.stderr)


def add_browse_commands(sub) -> None:
    s = sub.add_parser("serve", help="browse a database's runs in a web browser, on this machine",
                       description="Serve every run of a database as web pages (the views a notebook shows), "
                                   "read-only, until Ctrl-C. A page of a run still going reloads itself.")
    s.add_argument("db", nargs="?", metavar="DB", help=f"the run database (default: $KSCIENCE_DB or ./{DEFAULT_DB})")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="N",
                   help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)")
    s.add_argument("--host", default=LOCAL, metavar="ADDRESS",
                   help=f"address to listen on (default {LOCAL}, this machine only; another address shows the "
                        "runs, their kernels and prompts to whoever reaches it)")
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("figures", help="draw the report figures of a run or a campaign as PNG files",
                       description="A run's report figures (timing, shapes, lineage, uplift, speed of light), or a "
                                   "campaign's figure with each of its runs' figures, into DIR.")
    s.add_argument("target", metavar="RUN_OR_CAMPAIGN_ID", help="a run (r-...) or a campaign (k-...)")
    s.add_argument("-o", "--out", required=True, metavar="DIR", help="folder the PNG files are written to")
    s.add_argument("--overwrite", action="store_true",
                   help="replace figures git tracks there (the committed ones in figures/, say); refused without it")
    add_db_option(s)
    s.set_defaults(func=cmd_figures)


class _Pages(BaseHTTPRequestHandler):
    """GET / (every run), /run/ID, /candidate/ID, /campaign/ID; each answered from a read-only connection of
    its own, so a run writing the database meanwhile is seen as it goes."""

    db: Path
    export = None

    def do_GET(self) -> None:
        kind, _, ident = self.path.split("?")[0].strip("/").partition("/")
        try:
            with open_store(self.db, create=False, readonly=True) as store:
                page = self._page(store, kind, ident)
        except StoreError as exc:
            return self._send(HTTPStatus.NOT_FOUND, str(exc))
        if page is None:
            return self._send(HTTPStatus.NOT_FOUND, f"no page {self.path}: the runs are at /")
        self._send(HTTPStatus.OK, page, "text/html; charset=utf-8")

    def _page(self, store, kind: str, ident: str) -> str | None:
        if not kind:
            return self.export.index_page(store)
        if not ident:
            return None
        if kind == "run":
            return self.export.run_page(store, ident, links=True)
        if kind == "candidate":
            return self.export.candidate_page(store, ident)
        if kind == "campaign":
            return self.export.campaign_page(store, ident)
        return None

    def _send(self, status: HTTPStatus, body: str, kind: str = "text/plain; charset=utf-8") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args) -> None:  # a page served is no news on the terminal
        pass


def server(db: str | Path, host: str = LOCAL, port: int = DEFAULT_PORT) -> ThreadingHTTPServer:
    """The HTTP server of `kscience serve`, bound but not yet serving (`serve_forever`)."""
    handler = type("Pages", (_Pages,), {"db": Path(db), "export": _export()})
    try:
        return ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}"
                         + (" (another program has it: --port N, or --port 0 for a free one)"
                            if exc.errno == 98 else "")) from None


def cmd_serve(args) -> int:
    db = Path(args.db or default_db()).expanduser()
    with _store(str(db)):  # a missing or foreign file is said now, not on the first page
        pass
    httpd = server(db, args.host, args.port)
    host, port = httpd.server_address[:2]
    print(f"kscience: serving {db} at http://{host}:{port}/ (read-only; Ctrl-C to stop)", file=sys.stderr)
    if args.host not in (LOCAL, "localhost", "::1"):
        print(f"kscience: on {args.host}, whoever reaches this machine sees the runs, their kernels and prompts",
              file=sys.stderr)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:  # the way to stop serving, not a failure
        print("kscience: stopped serving", file=sys.stderr)
    finally:
        httpd.server_close()
    return 0


def cmd_figures(args) -> int:
    export = _export()
    with _store(args.db) as store:
        command = (f"kscience figures {args.target} -o {shlex.quote(args.out)} --db {shlex.quote(str(store.path))}"
                   + (" --overwrite" if args.overwrite else ""))
        try:
            if args.target.startswith("k-"):
                store.campaign(args.target)
                written = export.write_campaign_figures(store, args.target, args.out, command, args.overwrite)
            else:
                store.run(args.target)
                written = export.write_run_figures(store, args.target, args.out, command, args.overwrite)
        except (StoreError, export.ReportError) as exc:
            raise UsageError(str(exc)) from None
    for path in written:
        print(path)
    return 0
