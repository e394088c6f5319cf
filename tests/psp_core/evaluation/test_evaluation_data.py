"""Evaluation data: the downloader against a loopback HTTP server, and the archive converters
on archives built here in the official formats."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from psp_core.evaluation import evaluate_model
from psp_core.evaluation.archives import convert_sts17, convert_sts_year, convert_stsb
from psp_core.evaluation.data import (
    DEFAULT_EVAL_SOURCES,
    DownloadError,
    EvalSource,
    fetch_eval_data,
    prepare_eval_data,
)
from psp_core.files.download import retrying_session
from tests.loopback_http import QuietHTTPServer


class FileServer:
    """Serves ``files`` with Range support; ``plan[path]`` lists what each request gets:
    ``"drop"`` (headers for the whole body, half of it, then the connection closes), ``"500"``,
    or ``"ok"`` (the default once the plan is used up)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.plan: dict[str, list[str]] = {}
        self.requests: list[tuple[str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                range_header = self.headers.get("Range")
                server.requests.append((self.path, range_header))
                action = (
                    server.plan.get(self.path, []).pop(0) if server.plan.get(self.path) else "ok"
                )
                if self.path not in server.files:
                    self.send_error(404)
                    return
                if action == "500":
                    self.send_error(500, "try again")
                    return
                body = server.files[self.path]
                start = int(range_header.split("=")[1].split("-")[0]) if range_header else 0
                self.send_response(206 if start else 200)
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                payload = body[start:]
                if action == "drop":
                    self.wfile.write(payload[: len(payload) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(payload)

        self.httpd = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def server():
    instance = FileServer()
    yield instance
    instance.close()


def payload(size: int, seed: int = 0) -> bytes:
    return hashlib.shake_256(seed.to_bytes(4, "little")).digest(size)


def test_interrupted_download_resumes_byte_identical(server, tmp_path):
    body = payload(3 << 20)
    server.files["/data.bin"] = body
    server.plan["/data.bin"] = ["drop"]

    paths = fetch_eval_data({"data.bin": f"{server.url}/data.bin"}, tmp_path)

    assert paths["data.bin"].read_bytes() == body
    assert len(server.requests) == 2
    resumed_from = int(server.requests[1][1].split("=")[1].rstrip("-"))
    assert 0 < resumed_from <= len(body) // 2  # the second request asked only for the rest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin"]


def test_server_error_is_retried(server, tmp_path):
    body = payload(5000, seed=1)
    server.files["/x.zip"] = body
    server.plan["/x.zip"] = ["500"]
    paths = fetch_eval_data(
        {"x.zip": f"{server.url}/x.zip"}, tmp_path, session=retrying_session(backoff=0)
    )
    assert paths["x.zip"].read_bytes() == body
    assert [path for path, _ in server.requests] == ["/x.zip", "/x.zip"]


def test_complete_file_is_a_cache_hit(server, tmp_path):
    server.files["/a.txt"] = b"hello\n"
    fetch_eval_data({"a.txt": f"{server.url}/a.txt"}, tmp_path)
    fetch_eval_data({"a.txt": f"{server.url}/a.txt"}, tmp_path)
    assert len(server.requests) == 1


def test_checksum_mismatch_and_missing_file_are_errors(server, tmp_path):
    server.files["/a.txt"] = b"hello\n"
    wrong = EvalSource(f"{server.url}/a.txt", "tatoeba", sha256="0" * 64)
    with pytest.raises(DownloadError, match="sha256"):
        fetch_eval_data({"a.txt": wrong}, tmp_path)
    assert list(tmp_path.iterdir()) == []
    right = EvalSource(f"{server.url}/a.txt", "tatoeba", hashlib.sha256(b"hello\n").hexdigest())
    assert fetch_eval_data({"a.txt": right}, tmp_path)["a.txt"].read_bytes() == b"hello\n"
    with pytest.raises(DownloadError, match="HTTP 404"):
        fetch_eval_data({"b.txt": f"{server.url}/missing.txt"}, tmp_path, attempts=2)
    with pytest.raises(ValueError, match="plain file name"):
        fetch_eval_data({"../b.txt": f"{server.url}/a.txt"}, tmp_path)


def test_default_sources_cover_every_suite():
    formats = {source.format for source in DEFAULT_EVAL_SOURCES.values()}
    assert formats == {f"sts{y}" for y in range(2012, 2017)} | {
        "sts17-input",
        "sts17-gold",
        "stsb",
        "tatoeba",
    }
    assert "tatoeba.deu-eng.deu" in DEFAULT_EVAL_SOURCES


# --- converters ------------------------------------------------------------------------------------


def zip_bytes(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return buffer.getvalue()


STS2012 = {
    "test-gold/STS.input.MSRpar.txt": "A cat sits.\tA cat is sitting.\nDogs run.\tA man cooks.\n",
    "test-gold/STS.gs.MSRpar.txt": "4.8\n0.4\n",
    "test-gold/STS.input.surprise.OnWN.txt": "red\tcrimson\r\nblue\tgreen\r\n",
    "test-gold/STS.gs.surprise.OnWN.txt": "4.0\r\n1.25\r\n",
    "test-gold/STS.output.MSRpar.txt": "ignored\n",
    "test-gold/00-readme.txt": "readme\n",
}
STS2016 = {  # 2016 names, extra source columns, an unscored pair
    "sts2016-english-with-gs-v1.0/STS2016.input.headlines.txt": (
        "Fire kills 3.\tBlaze leaves three dead.\tsrc1\tsrc2\n"
        "Stocks fall.\tMarkets drop.\tsrc1\tsrc2\n"
        "Rain today.\tSun tomorrow.\tsrc1\tsrc2\n"
    ),
    "sts2016-english-with-gs-v1.0/STS2016.gs.headlines.txt": "4.6\n\n0.8\n",
}
STS17_INPUT = {
    "STS2017.eval.v1.1/STS.input.track2.ar-en.txt": "two men are crying\tرجلان يبكيان.\n",
    "STS2017.eval.v1.1/STS.input.track4a.es-en.txt": "Dos niños bailan\tKids are dancing.\n",
    "STS2017.eval.v1.1/STS.input.track5.en-en.txt": "A dog.\tA puppy.\nA car.\tA tree.\n",
    "STS2017.eval.v1.1/LICENSE.txt": "cc\n",
}
STS17_GOLD = {
    "STS2017.gs/STS.gs.track2.ar-en.txt": "4.2\n",
    "STS2017.gs/STS.gs.track4a.es-en.txt": "4.4\n",
    "STS2017.gs/STS.gs.track5.en-en.txt": "3.8\n0.0\n",
}
STSB_DEV = (
    "main-captions\tMSRvid\t2012test\t0000\t5.000\tA man with a hard hat is dancing.\t"
    "A man wearing a hard hat is dancing.\n"
    "main-news\theadlines\t2013\t0001\t1.200\tObama visits Japan.\tRain in Spain.\tsrc\textra\n"
)


def tar_bytes(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in members.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_sts_year_archives_convert_to_the_layout(tmp_path):
    (tmp_path / "2012.zip").write_bytes(zip_bytes(STS2012))
    (tmp_path / "2016.zip").write_bytes(zip_bytes(STS2016))
    eval_dir = tmp_path / "eval"
    assert sorted(
        Path(p).name for p in convert_sts_year(tmp_path / "2012.zip", "2012", eval_dir)
    ) == [
        "MSRpar.tsv",
        "OnWN.tsv",
    ]
    convert_sts_year(tmp_path / "2016.zip", "2016", eval_dir)
    assert (eval_dir / "sts/2012/MSRpar.tsv").read_text() == (
        "4.8\tA cat sits.\tA cat is sitting.\n0.4\tDogs run.\tA man cooks.\n"
    )
    assert (eval_dir / "sts/2012/OnWN.tsv").read_text() == "4.0\tred\tcrimson\n1.25\tblue\tgreen\n"
    assert (eval_dir / "sts/2016/headlines.tsv").read_text() == (
        "4.6\tFire kills 3.\tBlaze leaves three dead.\n0.8\tRain today.\tSun tomorrow.\n"
    )


def test_sts17_and_stsb_archives_convert_keeping_column_order(tmp_path):
    (tmp_path / "in.zip").write_bytes(zip_bytes(STS17_INPUT))
    (tmp_path / "gs.zip").write_bytes(zip_bytes(STS17_GOLD))
    (tmp_path / "stsb.tar.gz").write_bytes(tar_bytes({"stsbenchmark/sts-dev.csv": STSB_DEV}))
    eval_dir = tmp_path / "eval"
    written = convert_sts17(tmp_path / "in.zip", tmp_path / "gs.zip", eval_dir)
    assert sorted(Path(p).name for p in written) == ["ar-en.tsv", "en-en.tsv", "es-en.tsv"]
    assert (eval_dir / "sts17/ar-en.tsv").read_text() == "4.2\ttwo men are crying\tرجلان يبكيان.\n"
    assert (
        eval_dir / "sts17/es-en.tsv"
    ).read_text() == "4.4\tDos niños bailan\tKids are dancing.\n"
    convert_stsb(tmp_path / "stsb.tar.gz", eval_dir)
    assert (eval_dir / "stsb/dev.tsv").read_text() == (
        "5.000\tA man with a hard hat is dancing.\tA man wearing a hard hat is dancing.\n"
        "1.200\tObama visits Japan.\tRain in Spain.\n"
    )


def test_gold_and_input_of_different_length_is_refused(tmp_path):
    members = {"STS.input.x.txt": "a\tb\nc\td\n", "STS.gs.x.txt": "1.0\n"}
    (tmp_path / "bad.zip").write_bytes(zip_bytes(members))
    with pytest.raises(ValueError, match="2 sentence pairs but 1 gold lines"):
        convert_sts_year(tmp_path / "bad.zip", "2014", tmp_path / "eval")


def test_prepare_eval_data_downloads_converts_and_evaluates(server, tmp_path, model):
    server.files.update(
        {
            "/2012.zip": zip_bytes(STS2012),
            "/in.zip": zip_bytes(STS17_INPUT),
            "/gs.zip": zip_bytes(STS17_GOLD),
            "/stsb.tgz": tar_bytes({"stsbenchmark/sts-dev.csv": STSB_DEV}),
            "/tatoeba.nld-eng.nld": b"Hallo wereld.\nDag.\n",
            "/tatoeba.nld-eng.eng": b"Hello world.\nBye.\n",
        }
    )
    sources = {
        "STS2012-en-test.zip": EvalSource(f"{server.url}/2012.zip", "sts2012"),
        "sts2017.eval.v1.1.zip": EvalSource(f"{server.url}/in.zip", "sts17-input"),
        "sts2017.gs.zip": EvalSource(f"{server.url}/gs.zip", "sts17-gold"),
        "Stsbenchmark.tar.gz": EvalSource(f"{server.url}/stsb.tgz", "stsb"),
        "tatoeba.nld-eng.nld": EvalSource(f"{server.url}/tatoeba.nld-eng.nld", "tatoeba"),
        "tatoeba.nld-eng.eng": EvalSource(f"{server.url}/tatoeba.nld-eng.eng", "tatoeba"),
    }
    eval_dir = tmp_path / "eval"
    written = prepare_eval_data(eval_dir, sources=sources)
    assert len(written) == 2 + 3 + 1 + 2
    assert (eval_dir / "tatoeba/nld-eng.nld").read_text() == "Hallo wereld.\nDag.\n"
    requests_before = len(server.requests)
    prepare_eval_data(eval_dir, sources=sources)  # everything cached: no request
    assert len(server.requests) == requests_before

    results = evaluate_model(model, eval_dir, ["sts", "sts17", "stsb", "tatoeba"])
    assert set(results.sts["2012"]) == {"MSRpar", "OnWN"}
    assert set(results.sts17) == {"ar-en", "es-en", "en-en"}
    assert results.tatoeba["nld"].n == 2
    assert "STS 2012 SMTnews" in results.missing


def test_prepare_eval_data_reports_failed_downloads(server, tmp_path):
    server.files["/2012.zip"] = zip_bytes(STS2012)
    sources = {
        "STS2012-en-test.zip": EvalSource(f"{server.url}/2012.zip", "sts2012"),
        "Stsbenchmark.tar.gz": EvalSource(f"{server.url}/gone.tgz", "stsb"),
    }
    with pytest.raises(DownloadError, match="1 downloads failed.*gone.tgz"):
        prepare_eval_data(tmp_path / "eval", sources=sources)
    assert (tmp_path / "eval/sts/2012/MSRpar.tsv").is_file()  # the others were still converted
    assert not os.path.exists(tmp_path / "eval/stsb")
