"""The SQLite file under the run store: opening it (read-only where nothing needs migrating),
its schema versions and their migration, transactions, and credentials kept out of it.

Durability: WAL journal with `synchronous=FULL`. WAL alone (at NORMAL) already survives a killed
process, because committed pages sit in the WAL in the OS cache; FULL also fsyncs every commit,
so a committed row survives a power cut as well. A run commits a few rows per evaluation and an
evaluation takes seconds, so the fsyncs cost nothing measurable.

One connection per Database, guarded by a lock: the run's controller thread writes while a
notebook thread reads. Other processes (a dashboard reading a CLI run) open their own; WAL lets
them read while the run writes.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

from kscience.redact import redact, secret_values

SCHEMA_VERSION = 7  # schema/v1.sql creates the tables; v2.sql ... v7.sql each migrate the version before
# Migrations are additive: older rows simply lack what a later version adds.
SCHEMA_DIR = Path(__file__).parent / "schema"

# Columns stored as JSON text and read back as objects.
JSON_COLUMNS = ("overrides", "config", "environment", "result", "plan", "payload", "compile_facts", "ncu", "sol",
                "parts", "rules")


class StoreError(Exception):
    """A database that cannot be opened or used, or a run that is not in it. One line."""


def _row(row: sqlite3.Row | None) -> dict | None:
    if row is None:
        return None
    out = dict(row)
    for key in JSON_COLUMNS:
        if isinstance(out.get(key), str):
            out[key] = json.loads(out[key])
    return out


class Database:
    """`readonly`: for commands that only read (`runs`, `show`, a report). A file of the current
    schema is then opened read-only, and nothing is ever written to a file that is then refused:
    the schema is checked before the journal mode is set, since setting it rewrites the header."""

    def __init__(self, path: str | Path, *, readonly: bool = False):
        self.path = Path(path).expanduser()
        if not self.path.parent.is_dir():
            raise StoreError(f"cannot open database {self.path}: folder {self.path.parent} does not exist")
        self._lock = threading.RLock()
        self._secrets = secret_values()
        self._db: sqlite3.Connection | None = None
        try:
            version = self._check_schema() if self.path.is_file() else 0
            # Read-only where nothing needs migrating; an older kscience file is migrated in place.
            self.readonly = readonly and version == SCHEMA_VERSION
            # Read as immutable where no -wal file is beside it (no writer has it open), as the schema
            # probe does: a read-only connection to a WAL file would leave -wal and -shm files behind.
            self._db = self._connect(self.readonly, "mode=ro" if self._wal_beside() else "immutable=1")
            self._db.execute("PRAGMA foreign_keys=ON")
            if not self.readonly:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                self._migrate()
        except sqlite3.DatabaseError as exc:
            self._close_quietly()
            raise StoreError(f"cannot use {self.path} as a kscience database: {exc}") from None
        except StoreError:
            self._close_quietly()
            raise

    def _connect(self, readonly: bool, query: str = "mode=ro") -> sqlite3.Connection:
        target, uri = (f"{self.path.resolve().as_uri()}?{query}", True) if readonly else (str(self.path), False)
        db = sqlite3.connect(target, uri=uri, check_same_thread=False, isolation_level=None, timeout=30)
        db.row_factory = sqlite3.Row
        return db

    def _wal_beside(self) -> bool:
        return self.path.with_name(self.path.name + "-wal").exists()

    def _check_schema(self) -> int:
        """The schema version of an existing file, read without changing a byte of it; a file that is
        not a kscience database (or is one of a newer kscience) is refused here."""
        # Without a -wal file beside it the file holds everything: read it as immutable, since even a
        # read-only connection to a WAL file leaves -wal and -shm files behind.
        probe = self._connect(readonly=True, query="mode=ro" if self._wal_beside() else "immutable=1")
        try:
            version = probe.execute("PRAGMA user_version").fetchone()[0]
            tables = probe.execute("SELECT count(*) FROM sqlite_master WHERE type='table'").fetchone()[0]
        finally:
            probe.close()
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer kscience "
                             f"(schema {version}, this one reads {SCHEMA_VERSION})")
        if version == 0 and tables:
            raise StoreError(f"{self.path} is an SQLite database but not a kscience one")
        return version

    def _close_quietly(self) -> None:
        if self._db is not None:
            self._db.close()

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        with self._tx():  # two processes opening a new file at once: the second waits, then sees the schema
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version == SCHEMA_VERSION:
                return
            if version == 0:
                if self._db.execute("SELECT count(*) FROM sqlite_master WHERE type='table'").fetchone()[0]:
                    raise StoreError(f"{self.path} is an SQLite database but not a kscience one")
                self._script(1)
                version = 1
            for step in range(version + 1, SCHEMA_VERSION + 1):  # in one transaction: all steps or none
                self._script(step)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _script(self, version: int) -> None:
        """Run schema/v<version>.sql statement by statement, inside the caller's transaction
        (sqlite3's executescript would commit first)."""
        sql = (SCHEMA_DIR / f"v{version}.sql").read_text()
        sql = "\n".join(line for line in sql.splitlines() if not line.startswith("--"))
        for statement in sql.split(";"):
            if statement.strip():
                self._db.execute(statement)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- plumbing ----------------------------------------------------------------------------
    def _tx(self):
        return _Transaction(self)

    def _query(self, sql: str, args=()) -> list[dict]:
        with self._lock:
            try:
                return [_row(r) for r in self._db.execute(sql, args).fetchall()]
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path}: {exc}") from None

    def _write(self, sql: str, args=()) -> int:
        with self._tx():
            return self._db.execute(sql, args).lastrowid

    def _clean(self, value):
        """Credentials never reach the database: any secret-looking environment value is masked."""
        if isinstance(value, str):
            return redact(value, self._secrets)
        if isinstance(value, (dict, list)):
            return redact(json.dumps(value), self._secrets)
        return value


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT under the store's lock, re-entrant (inner blocks join the outer one).
    A database error rolls the whole transaction back and surfaces as a one-line StoreError."""

    def __init__(self, store: Database):
        self.store = store

    def __enter__(self):
        self.store._lock.acquire()
        self.outer = not self.store._db.in_transaction
        if self.outer:
            self.store._db.execute("BEGIN IMMEDIATE")
        return self

    def __exit__(self, exc_type, exc, tb):
        db = self.store._db
        try:
            if self.outer:
                db.execute("ROLLBACK" if exc_type else "COMMIT")
        except sqlite3.DatabaseError as failure:  # a COMMIT that fails (disk full) leaves nothing half-written
            if db.in_transaction:
                db.execute("ROLLBACK")
            exc = failure
        finally:
            self.store._lock.release()
        if isinstance(exc, sqlite3.DatabaseError):
            raise StoreError(f"{self.store.path}: {exc}") from None
