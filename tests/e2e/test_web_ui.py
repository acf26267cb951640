"""The web UI in a real browser: `shoal serve` with SmolLM2 split over the
local device and two loopback workers, driven by Selenium in Debian's headless
Chromium. The chat page streams an answer into the assistant bubble; the
cluster page shows one box per device with the layers /v1/cluster reports.
Screenshots of both pages are saved under the test's tmp_path."""
import os
import time

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from server_fixtures import Server

CHROMIUM = os.environ.get("SHOAL_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SHOAL_CHROMEDRIVER", "/usr/bin/chromedriver")


# ---------------------------------------------------------------- browser


def make_driver():
    if not os.path.exists(CHROMIUM) or not os.path.exists(CHROMEDRIVER):
        pytest.fail(f"Chromium ({CHROMIUM}) and chromedriver ({CHROMEDRIVER}) are needed: "
                    "install chromium and chromium-driver (scripts/setup)")
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,860", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    return driver


def browser_errors(driver):
    """SEVERE console entries (JavaScript errors, failed loads)."""
    try:
        entries = driver.get_log("browser")
    except Exception:  # noqa: BLE001 - logging is a diagnostic, not the test
        return []
    # A 503 from /health while the model loads is the page polling, not an error.
    return [e["message"] for e in entries
            if e.get("level") == "SEVERE" and not ("/health" in e["message"] and "503" in e["message"])]


def screenshot(driver, path):
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")


def chat_round_trip(driver, base, message, shot, max_tokens=48, reply_timeout=180):
    """Opens the chat page, sets temperature/max tokens in the settings panel,
    sends `message` with Enter and waits for the streamed answer to finish.
    Returns the assistant bubble's text."""
    driver.get(base + "/")
    wait = WebDriverWait(driver, 20)
    wait.until(lambda d: d.execute_script(
        "return !!(window.marked && window.DOMPurify && window.hljs)"), "browser libraries did not load")
    wait.until(lambda d: d.find_element(By.ID, "server-status").get_attribute("data-state") == "ready",
               "the page did not see the server as ready")

    # Settings: greedy and short, through the panel like a user.
    driver.find_element(By.ID, "toggle-settings").click()
    wait.until(lambda d: d.find_element(By.ID, "settings").is_displayed())
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#set-model option")) >= 2,
               "the model list from /v1/models did not arrive")
    for field, value in (("set-temperature", "0"), ("set-max-tokens", str(max_tokens))):
        box = driver.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    driver.find_element(By.ID, "close-settings").click()
    stored = driver.execute_script("return JSON.parse(localStorage.getItem('shoal.settings'))")
    assert stored["max_tokens"] == str(max_tokens) and stored["temperature"] == "0", stored

    driver.find_element(By.ID, "new-chat").click()
    box = driver.find_element(By.ID, "input")
    box.send_keys(message)
    box.send_keys(Keys.ENTER)

    user = WebDriverWait(driver, 10).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".message.user .content"), "the user message did not appear")
    assert user[-1].text.strip() == message
    answer = lambda d: d.find_elements(By.CSS_SELECTOR, ".message.assistant .content")  # noqa: E731
    WebDriverWait(driver, reply_timeout).until(
        lambda d: answer(d) and answer(d)[-1].text.strip(), "no streamed text in the assistant bubble")
    WebDriverWait(driver, reply_timeout).until(
        lambda d: not d.find_element(By.ID, "stop").is_displayed(), "the Stop button stayed: stream did not end")
    assert driver.find_element(By.ID, "send").is_displayed()
    bubble = answer(driver)[-1]
    text = bubble.text.strip()
    assert text, "empty answer"
    assert "error" not in bubble.find_element(By.XPATH, "..").get_attribute("class").split(), text
    # The conversation was kept, with its answer, and appears in the list.
    convs = driver.execute_script("return JSON.parse(localStorage.getItem('shoal.conversations'))")
    current = driver.execute_script("return JSON.parse(localStorage.getItem('shoal.current'))")
    conv = next(c for c in convs if c["id"] == current)
    assert [m["role"] for m in conv["messages"]] == ["user", "assistant"]
    assert conv["messages"][1]["content"].strip()
    assert driver.find_elements(By.CSS_SELECTOR, f'#conversation-list li[data-id="{current}"]')
    screenshot(driver, shot)
    return text


def check_cluster_page(driver, base, cluster, shot):
    """Opens the cluster page and checks one .device box per device of the
    /v1/cluster answer `cluster`, with matching data-layers."""
    driver.get(base + "/cluster")
    devices = cluster["devices"]
    WebDriverWait(driver, 20).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, ".device")) == len(devices),
        f"expected {len(devices)} .device boxes")
    n_layer = cluster["model"]["n_layer"]
    total = 0
    for dev in devices:
        layers = dev["layer_end"] - dev["layer_begin"]
        boxes = [b for b in driver.find_elements(By.CSS_SELECTOR, ".device")
                 if b.get_attribute("data-address") == dev["address"]]
        assert len(boxes) == 1, f"no single box for {dev['address']}"
        assert int(boxes[0].get_attribute("data-layers")) == layers, dev
        assert dev["address"] in boxes[0].text
        total += int(boxes[0].get_attribute("data-layers"))
    assert total == n_layer
    assert cluster["model"]["name"] in driver.find_element(By.ID, "model-title").text
    # The live chart: Chart.js loaded and drew into its canvas.
    WebDriverWait(driver, 10).until(lambda d: d.execute_script(
        "const c = document.getElementById('tps-chart');"
        "return !!window.Chart && !!Chart.getChart(c) && c.width > 0"), "tok/s chart not drawn")
    time.sleep(2)  # a couple of polls, so the chart has a line
    # The whole page in one picture: the window as tall as the document.
    size = driver.get_window_size()
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(size["width"], max(size["height"], height + 140))
    time.sleep(0.5)
    screenshot(driver, shot)
    driver.set_window_size(size["width"], size["height"])


# ---------------------------------------------------------------- test


def test_web_ui(shoal_bin, smollm2, workers, tmp_path):
    ws = workers(2)
    server = Server(shoal_bin, smollm2, tmp_path, "--parallel", "2", "--rpc", ",".join(w.address for w in ws),
                    wait=False)
    driver = None
    try:
        server.wait_ready(300)
        status, cluster = server.get_json("/v1/cluster")
        assert status == 200, cluster
        assert len(cluster["devices"]) == 3, cluster["devices"]
        assert sum(d["layer_end"] - d["layer_begin"] for d in cluster["devices"]) == cluster["model"]["n_layer"]

        driver = make_driver()
        text = chat_round_trip(driver, server.base, "What is the capital of France?", tmp_path / "chat.png")
        print(f"answer: {text!r}")
        check_cluster_page(driver, server.base, cluster, tmp_path / "cluster.png")
        # The supervisor's view: both workers active; one killed shows as lost
        # and its layers come back to the others after the next request.
        def member_states(d):
            # The page redraws the list on every poll: an element found may be replaced before it is read.
            try:
                return {m.get_attribute("data-address"): m.get_attribute("data-state")
                        for m in d.find_elements(By.CSS_SELECTOR, ".member")}
            except StaleElementReferenceException:
                return {}

        WebDriverWait(driver, 10).until(
            lambda d: member_states(d) == {w.address: "active" for w in ws}, "workers not shown as active")
        ws[1].proc.kill()
        ws[1].proc.wait()
        r = server.client().chat.completions.create(model="default", max_tokens=2,
                                                    messages=[{"role": "user", "content": "Hi"}])
        assert r.usage.completion_tokens == 2  # re-planned around it
        WebDriverWait(driver, 10).until(lambda d: member_states(d).get(ws[1].address) == "lost",
                                        "the killed worker not shown as lost")
        WebDriverWait(driver, 10).until(
            lambda d: d.find_element(By.ID, "members-summary").text.startswith("1 re-plan")
            and len(d.find_elements(By.CSS_SELECTOR, ".device")) == 2, "the re-planned split not shown")
        screenshot(driver, tmp_path / "cluster-lost.png")
        errors = browser_errors(driver)
        assert not errors, errors
    except Exception:
        if driver is not None:
            try:
                screenshot(driver, tmp_path / "failure.png")
            except Exception:  # noqa: BLE001
                pass
        print(server.stderr())
        raise
    finally:
        if driver is not None:
            driver.quit()
        server.stop()


def test_cluster_page_shows_where_prompts_run(shoal_bin, smollm2, workers, tmp_path):
    """With --prefill-on, the cluster page names the prompts' worker beside the devices that generate, and
    counts the caches moved from it."""
    a, b = workers(2)
    server = Server(shoal_bin, smollm2, tmp_path, "--rpc", f"{a.address},{b.address}", "--ts", "0,0,1",
                    "--prefill-on", a.address, wait=False)
    driver = None
    try:
        server.wait_ready(300)
        server.client().completions.create(model="smollm2", prompt="The harbour at dawn", max_tokens=8, temperature=0)
        driver = make_driver()
        driver.get(server.base + "/cluster")
        WebDriverWait(driver, 20).until(
            lambda d: d.find_element(By.ID, "prompts-section").is_displayed(), "no prompts section")
        rows = driver.find_elements(By.CSS_SELECTOR, ".prompt-device")
        assert [r.get_attribute("data-address") for r in rows] == [a.address]
        assert "layers 0–29" in rows[0].text
        WebDriverWait(driver, 20).until(
            lambda d: d.find_element(By.ID, "prompts-summary").text.startswith("1 cache moved"),
            "the moved cache is not counted")
        screenshot(driver, tmp_path / "cluster-prompts.png")
    finally:
        if driver:
            driver.quit()
        server.stop()
