"""A PostgreSQL server of the project's own, for Dagster's run, event-log and schedule storage.

    python scripts/postgres.py start --data-dir .pgdata [--port 5433]
    python scripts/postgres.py stop --data-dir .pgdata
    python scripts/postgres.py status --data-dir .pgdata
    python scripts/postgres.py instance --dagster-home .dagster_home   # dagster.yaml on it

The server listens on 127.0.0.1 only, keeps everything (data, socket, log) under ``--data-dir``,
and is created on the first ``start`` (``initdb``, password authentication). Credentials come
from the environment, never from a file in the repository: ``PSP_PG_USER`` (default ``psp``),
``PSP_PG_PASSWORD`` (required), ``PSP_PG_DB`` (default ``dagster``). ``instance`` writes
``$DAGSTER_HOME/dagster.yaml``: ``configs/dagster.yaml`` with its ``storage`` replaced by
dagster-postgres's (the ``cluster`` extra), which reads the same variables plus ``PSP_PG_HOST``
and ``PSP_PG_PORT`` when Dagster starts. Debian's
``postgresql`` package provides the binaries (``/usr/lib/postgresql/<version>/bin``).
PostgreSQL refuses to run as root: under root the server runs as the ``postgres`` user, which
then owns the data directory. ``stop`` stops the server by its data directory (``pg_ctl`` reads
the postmaster's pid from it), so it stops exactly the process ``start`` started.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


class PostgresError(RuntimeError):
    pass


def bin_dir() -> Path:
    """The newest PostgreSQL's binaries (Debian keeps ``initdb``/``pg_ctl`` off the PATH)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    if found:
        return found[-1].parent
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        return Path(pg_ctl).parent
    raise PostgresError("PostgreSQL is not installed: apt-get install postgresql")


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(_as_server_user(command), capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise PostgresError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    return done


def credentials() -> tuple[str, str, str]:
    password = os.environ.get("PSP_PG_PASSWORD")
    if not password:
        raise PostgresError("set PSP_PG_PASSWORD (and optionally PSP_PG_USER, PSP_PG_DB)")
    return os.environ.get("PSP_PG_USER", "psp"), password, os.environ.get("PSP_PG_DB", "dagster")


def _initdb(data_dir: Path, user: str, password: str) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(data_dir, "postgres", "postgres")
        reachable = subprocess.run(["runuser", "-u", "postgres", "--", "test", "-w", str(data_dir)])
        if reachable.returncode != 0:
            raise PostgresError(
                f"{data_dir}: under root the server runs as the postgres user, which cannot "
                "reach this folder; choose one whose parent folders it may enter (o+x)"
            )
    data_dir.chmod(0o700)
    # the password reaches initdb through a file only it (the server's user) can read
    secret_dir = Path(tempfile.mkdtemp(prefix="psp-pg-"))
    pwfile = secret_dir / "password"
    try:
        pwfile.write_text(password + "\n")
        pwfile.chmod(0o600)
        if os.geteuid() == 0:
            for path in (secret_dir, pwfile):
                shutil.chown(path, "postgres", "postgres")
        _run(
            [str(bin_dir() / "initdb"), "-D", str(data_dir), "-U", user]
            + [f"--pwfile={pwfile}", "--auth=scram-sha-256", "--encoding=UTF8"]
        )
    finally:
        shutil.rmtree(secret_dir, ignore_errors=True)


def start(data_dir: Path, port: int) -> None:
    data_dir = data_dir.resolve()
    user, password, database = credentials()
    if not (data_dir / "PG_VERSION").is_file():
        _initdb(data_dir, user, password)
    if status(data_dir):
        print(f"already running: {data_dir}")
        return
    options = f"-h 127.0.0.1 -p {port} -k {data_dir}"
    _run(
        [str(bin_dir() / "pg_ctl"), "-D", str(data_dir), "-l", str(data_dir / "server.log")]
        + ["-o", options, "-w", "-t", "60", "start"]
    )
    _create_database(port, user, password, database)
    print(f"postgresql on 127.0.0.1:{port}, data {data_dir}, database {database}")


def _create_database(port: int, user: str, password: str, database: str) -> None:
    import psycopg2

    connection = psycopg2.connect(
        host="127.0.0.1", port=port, user=user, password=password, dbname="postgres"
    )
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
            if cursor.fetchone() is None:
                cursor.execute(f'CREATE DATABASE "{database}"')
    finally:
        connection.close()


def stop(data_dir: Path) -> None:
    data_dir = data_dir.resolve()
    if not status(data_dir):
        print(f"not running: {data_dir}")
        return
    _run([str(bin_dir() / "pg_ctl"), "-D", str(data_dir), "-m", "fast", "-w", "stop"])
    print(f"stopped: {data_dir}")


def status(data_dir: Path) -> bool:
    if not (data_dir / "PG_VERSION").is_file():
        return False
    command = _as_server_user([str(bin_dir() / "pg_ctl"), "-D", str(data_dir.resolve()), "status"])
    return subprocess.run(command, capture_output=True).returncode == 0


def write_instance(dagster_home: Path) -> Path:
    """``dagster_home/dagster.yaml``: the project's instance settings on PostgreSQL."""
    import yaml

    settings = yaml.safe_load((Path(__file__).parents[1] / "configs" / "dagster.yaml").read_text())
    names = ("username", "password", "hostname", "db_name", "port")
    variables = ("PSP_PG_USER", "PSP_PG_PASSWORD", "PSP_PG_HOST", "PSP_PG_DB", "PSP_PG_PORT")
    database = {n: {"env": v} for n, v in zip(names, variables, strict=True)}
    # psycopg2, the driver dagster-postgres is written for: SQLAlchemy 2.1 made plain
    # "postgresql://" mean psycopg 3, on which dagster-postgres 0.29.27's NOTIFY fails
    database["scheme"] = "postgresql+psycopg2"
    settings["storage"] = {"postgres": {"postgres_db": database}}
    dagster_home.mkdir(parents=True, exist_ok=True)
    path = dagster_home / "dagster.yaml"
    tmp = path.with_name(f"dagster.yaml.tmp-{os.getpid()}")
    tmp.write_text(yaml.safe_dump(settings, sort_keys=False))
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "stop", "status", "instance"))
    parser.add_argument("--data-dir", type=Path, default=Path(".pgdata"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PSP_PG_PORT", "5433")))
    parser.add_argument("--dagster-home", type=Path, default=Path(".dagster_home"))
    args = parser.parse_args(argv)
    try:
        if args.action == "start":
            start(args.data_dir, args.port)
        elif args.action == "stop":
            stop(args.data_dir)
        elif args.action == "instance":
            print(write_instance(args.dagster_home))
        else:
            running = status(args.data_dir)
            print("running" if running else "not running")
            return 0 if running else 3
    except PostgresError as error:
        print(f"postgres: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
