"""The console at GET /, in a real browser: Debian's headless Chromium
driven through its ChromeDriver by Selenium (WebDriver). The page must show
a table the test made, run a query typed into its SQL box, and show a
group's lag fall as the group commits. A screenshot is kept in
target/test-artifacts/console.png."""
import json
import os
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from conftest import ROOT, create_topic


def sql(node, text):
    req = urllib.request.Request(node.http + "/sql", data=text.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def browser():
    opts = Options()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1800"):
        opts.add_argument(a)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def click(driver, selector):
    """Clicks what `selector` finds, again if a redraw replaced it."""
    WebDriverWait(driver, 30, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: d.find_element(By.CSS_SELECTOR, selector).click() or True)


def lag_on_page(driver, group):
    for row in driver.find_elements(By.CSS_SELECTOR, "#lag tbody tr"):
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        if cells and cells[0] == group:
            return cells[-1]
    return None


def test_console_shows_a_table_runs_a_query_and_lag_falls(node):
    sql(node, "CREATE TABLE trades (id BIGINT PRIMARY KEY, sym TEXT, px DOUBLE)")
    create_topic(node.bootstrap, "raw-events.v1")
    p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all"})
    for i in range(100):
        p.produce("trades", json.dumps({"id": i, "sym": "S%d" % i, "px": i / 2}).encode())
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "console-g",
                  "enable.auto.commit": False})
    c.assign([TopicPartition("trades", 0, 0)])
    got = 0
    while got < 40:
        m = c.poll(5)
        assert m is not None and m.error() is None
        got += 1
    c.commit(asynchronous=False)

    driver = browser()
    try:
        driver.get(node.http + "/")
        # The page redraws its tables every 2 s: an element read as it is
        # replaced is stale, and the wait reads the page again.
        wait = WebDriverWait(driver, 30, ignored_exceptions=(StaleElementReferenceException,))
        wait.until(lambda d: "trades" in d.find_element(By.ID, "topics").text)
        wait.until(lambda d: lag_on_page(d, "console-g") == "60")
        # The node itself, leading what it keeps.
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#nodes tbody tr")) == 1)
        # Each partition with its leader, replicas and log end
        # (weir.partitions): trades' one partition holds 100 records.
        wait.until(lambda d: any(
            [c.text for c in row.find_elements(By.TAG_NAME, "td")][:2] == ["trades", "0"]
            and "100" in [c.text for c in row.find_elements(By.TAG_NAME, "td")]
            for row in d.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")))
        box = driver.find_element(By.ID, "sql")
        box.clear()
        box.send_keys("SELECT sym, px FROM trades WHERE id = 7")
        driver.find_element(By.ID, "run").click()
        wait.until(lambda d: "S7" in d.find_element(By.ID, "result").text)
        assert "3.5" in driver.find_element(By.ID, "result").text
        # A wrong statement shows the node's error.
        box.clear()
        box.send_keys("SELECT nope FROM trades")
        driver.find_element(By.ID, "run").click()
        wait.until(lambda d: "nope" in d.find_element(By.ID, "sql-error").text)
        # The group reads on and commits: the page's lag falls to 0.
        while got < 100:
            m = c.poll(5)
            assert m is not None and m.error() is None
            got += 1
        c.commit(asynchronous=False)
        wait.until(lambda d: lag_on_page(d, "console-g") == "0")
        # Picking the table tails it; a raw topic whose name needs quoting
        # in SQL too.
        click(driver, '#topics tr[data-topic="trades"]')
        wait.until(lambda d: "S99" in d.find_element(By.ID, "tail").text)
        p.produce("raw-events.v1", key=b"k", value=b"newest-event")
        assert p.flush(30) == 0
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, '#topics tr[data-topic="raw-events.v1"]'))
        click(driver, '#topics tr[data-topic="raw-events.v1"]')
        wait.until(lambda d: "newest-event" in d.find_element(By.ID, "tail").text)
        out = os.path.join(ROOT, "target", "test-artifacts")
        os.makedirs(out, exist_ok=True)
        assert driver.save_screenshot(os.path.join(out, "console.png"))
    finally:
        driver.quit()
        c.close()
