"""The Dagster UI, driven by Debian's headless Chromium: `dagster dev` on 127.0.0.1 with a
temporary DAGSTER_HOME, the asset graph shows the pipeline's assets, the language partitions
are listed, and one partition's materialization launched from the UI succeeds.

Needs ``chromium`` and ``chromium-driver`` (Debian packages) and the ``selenium`` package; the
test skips with a message when any is missing. Screenshots go to ``$PSP_TEST_ARTIFACTS``
(default ``test-artifacts/`` in the repository).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from dagster import DagsterInstance

from assets.settings.languages import load_registry
from pipelines.definitions import defs
from tests.ops.opus_server import OpusServer, build_moses_zip
from tests.pipelines.corpora import publish_de, write_eval_dir

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
selenium = pytest.importorskip(
    "selenium", reason="selenium is not installed (pip install selenium)"
)
pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(
        not (CHROMIUM and CHROMEDRIVER),
        reason="Chromium not found: apt-get install chromium chromium-driver",
    ),
]

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

STARTUP_SECONDS = 120
RUN_SECONDS = 120
#: how often a wait looks at the page again
POLL_SECONDS = 0.25


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def artifacts_dir() -> Path:
    path = Path(os.environ.get("PSP_TEST_ARTIFACTS", ROOT / "test-artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture()
def dagster_ui(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """`dagster dev` on a free 127.0.0.1 port, with the loopback OPUS server behind it."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    server = OpusServer().start()
    publish_de(server, build_moses_zip)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "configs" / "dagster.yaml", home / "dagster.yaml")
    write_eval_dir(tmp_path / "eval")
    port = free_port()
    env = os.environ | {
        "DAGSTER_HOME": str(home),
        "PSP_STORAGE_ROOT": str(tmp_path / "storage"),
        "PSP_OPUS_API": server.api_url,
        "PSP_EVAL_DIR": str(tmp_path / "eval"),
        "NO_PROXY": "127.0.0.1,localhost",
    }
    dagster = Path(sys.executable).with_name("dagster")
    command = [str(dagster), "dev", "-h", "127.0.0.1", "-p", str(port)]
    command += ["-m", "pipelines.definitions"]
    log = open(tmp_path / "dagster-dev.log", "wb")  # noqa: SIM115
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            assert process.poll() is None, (tmp_path / "dagster-dev.log").read_text()[-3000:]
            try:
                if requests.get(f"{base}/server_info", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            time.sleep(POLL_SECONDS)
        else:
            pytest.fail(f"dagster dev did not answer on {base} in {STARTUP_SECONDS}s")
        yield {
            "base": base,
            "storage": tmp_path / "storage",
            "log": tmp_path / "dagster-dev.log",
            "env": env,
            "home": home,
        }
    finally:
        _stop_group(process)
        log.close()
        server.stop()


def _stop_group(process: subprocess.Popen) -> None:
    """Stop dagster dev and the webserver, daemon and code servers it started (its group)."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture()
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1600,1000")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(2)
    try:
        yield driver
    finally:
        driver.quit()


def body_text(driver) -> str:
    return driver.find_element(By.TAG_NAME, "body").text


def wait_for_text(driver, pattern: str, seconds: float = 60) -> str:
    WebDriverWait(driver, seconds, poll_frequency=POLL_SECONDS).until(
        lambda d: re.search(pattern, body_text(d))
    )
    return body_text(driver)


def dismiss_community_dialog(driver) -> None:
    """Skip Dagster's community dialog, which a browser profile shows once: after it was
    skipped, no later page waits for it (each look for an absent button waits the implicit
    wait)."""
    if getattr(driver, "psp_dialog_skipped", False):
        return
    buttons = driver.find_elements(By.XPATH, "//button[normalize-space()='Skip']")
    for button in buttons:
        button.click()
    driver.psp_dialog_skipped = bool(buttons)


def launchpad_config(driver) -> str:
    """The text of the launchpad's config editor ('' until it is there)."""
    script = "var e = document.querySelector('.CodeMirror'); "
    script += "return e && e.CodeMirror ? e.CodeMirror.getValue() : '';"
    return driver.execute_script(script) or ""


def label_matches(label: str, name: str) -> bool:
    """Graph nodes truncate long names in the middle: ``langid_filt…_pairs``."""
    if "…" not in label:
        return label == name
    head, tail = label.split("…", 1)
    return name.startswith(head) and name.endswith(tail)


def test_the_ui_materializes_a_partition_and_shows_a_trained_language(
    dagster_ui: dict, browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One `dagster dev` and one browser for both parts (each start costs seconds): what a
    newcomer does first, then what they look at once a language is trained."""
    materialize_one_language_partition_from_the_ui(dagster_ui, browser)
    the_schedule_preview_names_each_runs_language_and_profile(dagster_ui, browser)
    a_trained_language_shows_its_loss_picture_checks_and_progress(dagster_ui, browser, monkeypatch)


def the_schedule_preview_names_each_runs_language_and_profile(dagster_ui: dict, browser) -> None:
    """Dagster's preview of a tick lists each run request by its job alone; a request's details
    (its row's config button) show its tags: the language and the profile."""
    browser.get(
        f"{dagster_ui['base']}/locations/pipelines.definitions/schedules/weekly_retrain_schedule"
    )
    wait_for_text(browser, "Preview tick result", STARTUP_SECONDS)
    dismiss_community_dialog(browser)
    browser.find_element(By.XPATH, "//button[contains(., 'Preview tick result')]").click()
    wait_for_text(browser, "Continue", 30)
    buttons = browser.find_elements(By.XPATH, "//button[contains(., 'Continue')]")
    [button for button in buttons if button.is_displayed()][-1].click()
    codes = load_registry().codes
    wait_for_text(browser, rf"{len(codes)} run requests", 60)
    rows = [b for b in browser.find_elements(By.XPATH, "//td//button") if b.is_displayed()]
    assert len(rows) == len(codes)
    rows[0].click()
    text = wait_for_text(browser, r"psp/language: \w+", 30)
    browser.save_screenshot(str(artifacts_dir() / "dagster-ui-schedule-preview.png"))
    assert f"psp/language: {codes[0]}" in text and "psp/profile: paper" in text
    assert "psp/trigger: schedule" in text


def materialize_one_language_partition_from_the_ui(dagster_ui: dict, browser) -> None:
    base, shots = dagster_ui["base"], artifacts_dir()
    asset_names = [
        k.to_user_string() for k in defs.get_repository_def().asset_graph.get_all_asset_keys()
    ]

    # the asset graph: every stage of the pipeline, in its group
    browser.get(
        f"{base}/assets/evaluation_scoreboard?view=lineage&lineageScope=upstream&lineageDepth=10"
    )
    text = wait_for_text(browser, r"raw_pairs", STARTUP_SECONDS)
    dismiss_community_dialog(browser)
    labels = [line.strip() for line in text.splitlines()]
    for name in asset_names:
        assert any(label_matches(label, name) for label in labels), f"{name} not in the graph"
    groups = ("data", "model", "scoreboard")
    for group in groups:
        assert group in labels
    browser.save_screenshot(str(shots / "dagster-ui-asset-graph.png"))

    # the launchpad opens with the few fields a run sets (the profile among them, on screen),
    # not every stage's force flag and the download retry settings
    browser.get(f"{base}/locations/pipelines.definitions/jobs/psp_language_job/playground")
    WebDriverWait(browser, 60, poll_frequency=POLL_SECONDS).until(lambda d: launchpad_config(d))
    dismiss_community_dialog(browser)
    lines = launchpad_config(browser).splitlines()
    browser.save_screenshot(str(shots / "dagster-ui-launchpad.png"))
    assert lines.index("  profile:") < 25, lines
    assert not [line for line in lines if re.match(r"\s+(force|retries|backoff|timeout):", line)]

    # the language partitions of the first stage
    browser.get(f"{base}/assets/raw_pairs?view=partitions")
    text = wait_for_text(browser, r"Missing \(8\)")
    for lang in load_registry().codes:
        assert lang in text.splitlines()

    # launch the materialization of partition "de" from the Materialize dialog
    dismiss_community_dialog(browser)
    browser.find_element(By.XPATH, "//button[contains(., 'Materialize')]").click()
    wait_for_text(browser, "Launch runs to materialize raw_pairs", 20)
    browser.find_element(By.XPATH, "//*[text()='Select a partition or create one']").click()
    option = [e for e in browser.find_elements(By.XPATH, "//*[text()='de']") if e.is_displayed()]
    option[-1].click()
    browser.find_element(By.XPATH, "//*[text()='Launch runs to materialize raw_pairs']").click()
    time.sleep(1)  # let the partition list fade out
    launch = browser.find_element(By.XPATH, "//button[starts-with(normalize-space(), 'Launch')]")
    assert launch.text in ("Launch run", "Launch 1 run", "Launch backfill"), launch.text
    browser.save_screenshot(str(shots / "dagster-ui-launch-dialog.png"))
    launch.click()
    WebDriverWait(browser, 30, poll_frequency=POLL_SECONDS).until(
        lambda d: "Launch runs to materialize" not in body_text(d)
    )

    # the run succeeds, for partition de only
    browser.get(f"{base}/runs")
    try:
        text = wait_for_text(browser, r"\bSuccess\b|\bFailure\b", RUN_SECONDS)
    finally:
        browser.save_screenshot(str(shots / "dagster-ui-runs.png"))
    assert "Success" in text, dagster_ui["log"].read_text()[-4000:]
    assert "partition: de" in text
    # launched from the UI, the run is tagged with its language and profile as it starts
    browser.get(f"{base}/runs")
    text = wait_for_text(browser, r"psp/profile: \w+", 30)
    assert "psp/language: de" in text, text
    assert (dagster_ui["storage"] / "de" / "raw_pairs" / "pairs.parquet").is_file()
    assert not (dagster_ui["storage"] / "fr").exists()
    browser.get(f"{base}/assets/raw_pairs?view=partitions")
    wait_for_text(browser, r"Materialized \(1\)")
    browser.save_screenshot(str(shots / "dagster-ui-partition-materialized.png"))


def a_trained_language_shows_its_loss_picture_checks_and_progress(
    dagster_ui: dict, browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """de trained with the smoke profile (`dagster job execute` on the UI's instance): the
    model's page shows the loss curve as a picture, the checks their descriptions, and the
    run's log the training progress lines."""
    base, shots = dagster_ui["base"], artifacts_dir()
    command = [str(Path(sys.executable).with_name("dagster")), "job", "execute"]
    command += ["-m", "pipelines.definitions", "-j", "psp_language_job"]
    command += ["--tags", '{"dagster/partition": "de"}', "-c", str(ROOT / "configs" / "smoke.yaml")]
    done = subprocess.run(
        command, cwd=ROOT, env=dagster_ui["env"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    browser.get(f"{base}/assets/psp_model?view=partitions&partition=de")
    page = wait_for_text(browser, r"loss_curve", RUN_SECONDS)
    dismiss_community_dialog(browser)
    assert re.search(r"epochs\s+Show schema", page)  # the epochs table shows inline
    browser.save_screenshot(str(shots / "dagster-ui-model-page.png"))
    # the pictures show inline (each value under the UI's 1,000-character limit): no click
    row = "//tr[td[normalize-space()='loss_curve']]"
    assert not browser.find_elements(By.XPATH, f"{row}//*[contains(text(), 'Show Markdown')]")
    pictures = WebDriverWait(browser, 30, poll_frequency=POLL_SECONDS).until(
        lambda d: [
            img
            for img in d.find_elements(By.TAG_NAME, "img")
            if (img.get_attribute("src") or "").startswith("data:image/svg+xml")
            and d.execute_script("return arguments[0].naturalWidth", img) > 0
        ]
    )
    assert pictures, "no rendered SVG picture on the psp_model page"
    browser.save_screenshot(str(shots / "dagster-ui-loss-curve.png"))
    # the promotion decision at a glance: the version, the promoted one, the decision, the
    # dev scores side by side (one version here: the first, promoted)
    page = browser.find_element(By.TAG_NAME, "body").text
    for field in ("promotion", "promoted_version", "promotion_scores"):
        assert re.search(rf"\b{field}\b", page), field
    assert re.search(r"promotion\s+promoted", page)

    # the evaluation's suites are tables, inline
    browser.get(f"{base}/assets/model_evaluation?view=partitions&partition=de")
    page = wait_for_text(browser, r"tatoeba\s+Show schema", RUN_SECONDS)
    assert re.search(r"sts\s+Show schema", page)
    browser.save_screenshot(str(shots / "dagster-ui-evaluation.png"))

    # the scoreboard: tables inline (its markdown, over the UI's limit, hid behind a click)
    scoreboard = [*command[:5], "-j", "scoreboard_job"]
    done = subprocess.run(
        scoreboard, cwd=ROOT, env=dagster_ui["env"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    browser.get(f"{base}/assets/evaluation_scoreboard")
    try:
        # key, the materialization's time, then the value
        page = wait_for_text(browser, r"scoreboard\s+[^\n]*\s+Show schema", RUN_SECONDS)
    finally:
        browser.save_screenshot(str(shots / "dagster-ui-scoreboard.png"))
    assert re.search(r"tatoeba\s+[^\n]*\s+Show schema", page)
    assert "Show Markdown" not in page

    browser.get(f"{base}/assets/psp_model?view=checks")
    wait_for_text(browser, r"model_weights_finite", RUN_SECONDS)
    browser.find_element(By.XPATH, "//*[normalize-space()='model_weights_finite']").click()
    try:
        text = wait_for_text(browser, r"Every weight is finite", 30)
    finally:
        browser.save_screenshot(str(shots / "dagster-ui-checks.png"))
    assert "Blocking" in text

    monkeypatch.setenv("DAGSTER_HOME", str(dagster_ui["home"]))  # its dagster.yaml reads it
    with DagsterInstance.from_config(str(dagster_ui["home"])) as instance:
        (run,) = [r for r in instance.get_runs() if r.job_name == "psp_language_job"]
    browser.get(f"{base}/runs/{run.run_id}")
    search = WebDriverWait(browser, RUN_SECONDS, poll_frequency=POLL_SECONDS).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "input[placeholder*='Filter']")
    )
    search[0].send_keys("eta epoch")
    text = wait_for_text(browser, r"epoch 1/1 step \d+/\d+ megabatch \d+ loss", 30)
    browser.save_screenshot(str(shots / "dagster-ui-progress.png"))
    assert "pairs/s" in text
