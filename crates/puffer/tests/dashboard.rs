//! End-to-end test of the dashboard page (`GET /`): a real `puffer serve --sample` under a
//! background load of checked gets and searches, the page rendered by headless Chromium,
//! and the DOM it leaves checked against the admin API: one card per replica, and every
//! plot drawing exactly the samples the server recorded up to the page's last refresh.
//! A screenshot is saved to `target/dashboard-screenshot.png`.
//!
//! Needs Debian's `chromium` (`apt-get install chromium`); without it the Chromium tests
//! print why they are skipped and pass.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;

use common::{collect, ServeProcess};

/// Virtual milliseconds Chromium lets the page run: about five one-second refreshes.
const VIRTUAL_TIME_BUDGET_MS: u64 = 5000;
/// Real time one Chromium run may take before the test gives up.
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(120);
/// Browser window (and screenshot) size.
const WINDOW_WIDTH: u32 = 1400;
const WINDOW_HEIGHT: u32 = 1000;
/// How long the load runs before the page is opened, so the plots have a history.
const LOAD_BEFORE_PAGE: Duration = Duration::from_secs(10);
/// Load threads issuing gets and searches while the page is open.
const LOAD_THREADS: usize = 2;
/// Rows of the sample table (keys `b00000` to `b04999`).
const SAMPLE_ROWS: u64 = 5000;
/// Countries of the sample table, searched by the load.
const COUNTRIES: &[&str] = &[
    "PRT", "GBR", "FRA", "ESP", "DEU", "IRL", "ITA", "BEL", "NLD", "USA",
];

/// `puffer serve --sample` on a fresh temporary data directory.
fn sample_server(env: &[(&str, &str)]) -> ServeProcess {
    let data = TempDir::new().expect("cannot create a temporary directory");
    ServeProcess::start(data, &["--sample"], env)
}

// ---------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build()
}

/// A GET answer as JSON after checking it is 200.
fn get_json(agent: &ureq::Agent, url: &str, token: Option<&str>) -> Result<Value, String> {
    let mut request = agent.get(url);
    if let Some(token) = token {
        request = request.set("Authorization", &format!("Bearer {token}"));
    }
    answer_json(request.call(), url)
}

fn post_json(agent: &ureq::Agent, url: &str, body: &Value) -> Result<Value, String> {
    answer_json(agent.post(url).send_json(body.clone()), url)
}

fn answer_json(result: Result<ureq::Response, ureq::Error>, url: &str) -> Result<Value, String> {
    match result {
        Ok(response) => response
            .into_json()
            .map_err(|e| format!("{url}: not JSON: {e}")),
        Err(ureq::Error::Status(status, response)) => Err(format!(
            "{url}: status {status}: {}",
            response.into_string().unwrap_or_default()
        )),
        Err(e) => Err(format!("{url}: {e}")),
    }
}

// ---------------------------------------------------------------------------------------
// The load
// ---------------------------------------------------------------------------------------

/// What a load thread did.
#[derive(Debug, Default)]
struct LoadReport {
    gets: u64,
    searches: u64,
    /// The first wrong or failed answer.
    error: Option<String>,
}

/// Threads issuing gets and searches, each answer checked, until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<LoadReport>>,
}

impl Load {
    fn start(base: &str, threads: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..threads)
            .map(|number| {
                let base = base.to_string();
                let stop = stop.clone();
                thread::spawn(move || run_load(&base, number as u64, &stop))
            })
            .collect();
        Load { stop, threads }
    }

    /// Stops every thread and checks that each answered correctly and did some work.
    fn finish(self) -> LoadReport {
        self.stop.store(true, Ordering::Relaxed);
        let mut total = LoadReport::default();
        for thread in self.threads {
            let report = thread.join().expect("a load thread panicked");
            if let Some(error) = report.error {
                panic!("the load got a wrong answer: {error}");
            }
            total.gets += report.gets;
            total.searches += report.searches;
        }
        assert!(
            total.gets > 0 && total.searches > 0,
            "the load did nothing: {total:?}"
        );
        total
    }
}

fn run_load(base: &str, seed: u64, stop: &AtomicBool) -> LoadReport {
    let agent = agent();
    let mut report = LoadReport::default();
    let mut state = 0x9E37_79B9_7F4A_7C15 ^ (seed + 1);
    while !stop.load(Ordering::Relaxed) {
        // xorshift64: which record, which country.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let result = if state.is_multiple_of(4) {
            report.searches += 1;
            let country = COUNTRIES[(state >> 8) as usize % COUNTRIES.len()];
            check_search(&agent, base, country)
        } else {
            report.gets += 1;
            check_get(&agent, base, &format!("b{:05}", (state >> 8) % SAMPLE_ROWS))
        };
        if let Err(error) = result {
            report.error = Some(error);
            break;
        }
    }
    report
}

/// Oracle: the record returned is the one asked for.
fn check_get(agent: &ureq::Agent, base: &str, key: &str) -> Result<(), String> {
    let answer = get_json(
        agent,
        &format!("{base}/v1/tables/bookings/records/{key}"),
        None,
    )?;
    if answer["record"]["id"] != key {
        return Err(format!("get {key} answered {answer}"));
    }
    Ok(())
}

/// Oracle: some rows match (every country has hundreds of bookings), each row has the
/// country searched for, and the limit holds.
fn check_search(agent: &ureq::Agent, base: &str, country: &str) -> Result<(), String> {
    let body = json!({"where": {"eq": {"country": country}}, "limit": 10});
    let answer = post_json(agent, &format!("{base}/v1/tables/bookings/search"), &body)?;
    let rows = answer["rows"]
        .as_array()
        .ok_or_else(|| format!("search {country}: no rows in {answer}"))?;
    let wrong = rows.iter().find(|row| row["country"] != country);
    if rows.is_empty() || rows.len() > 10 || wrong.is_some() {
        return Err(format!("search {country} answered {answer}"));
    }
    Ok(())
}

/// Waits until the server's history shows the load answered on some `bookings` replica.
fn wait_for_load_in_history(base: &str) {
    let agent = agent();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let history =
            get_json(&agent, &format!("{base}/v1/admin/history?last_s=10"), None).expect("history");
        let answered = history["replicas"]
            .as_array()
            .expect("replicas")
            .iter()
            .filter(|r| r["table"] == "bookings")
            .flat_map(|r| r["samples"].as_array().expect("samples").iter())
            .any(|s| s["response_per_second"].as_f64().unwrap_or(0.0) > 0.0);
        if answered {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the history shows no responses after 60 s of load: {history}"
        );
        thread::sleep(Duration::from_millis(250));
    }
}

// ---------------------------------------------------------------------------------------
// Chromium
// ---------------------------------------------------------------------------------------

/// Debian's Chromium, if installed.
fn find_chromium() -> Option<PathBuf> {
    let debian = PathBuf::from("/usr/bin/chromium");
    if debian.is_file() {
        return Some(debian);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("chromium"))
        .find(|candidate| candidate.is_file())
}

fn skip_without_chromium() -> Option<PathBuf> {
    let chromium = find_chromium();
    if chromium.is_none() {
        eprintln!(
            "dashboard test skipped: chromium not found; install it with apt-get install chromium"
        );
    }
    chromium
}

/// What headless Chromium left after letting the page run `VIRTUAL_TIME_BUDGET_MS`.
struct Rendered {
    /// The serialized DOM.
    dom: String,
    /// Chromium's stderr, for failure messages.
    stderr: String,
}

/// Loads `url` in headless Chromium and dumps the DOM once the virtual time budget is
/// spent; with `screenshot`, also saves a PNG of the window then.
fn render(chromium: &Path, url: &str, screenshot: Option<&Path>) -> Rendered {
    let profile = TempDir::new().expect("cannot create a Chromium profile directory");
    let mut command = Command::new(chromium);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--virtual-time-budget={VIRTUAL_TIME_BUDGET_MS}"))
        .arg(format!("--window-size={WINDOW_WIDTH},{WINDOW_HEIGHT}"));
    if let Some(path) = screenshot {
        command.arg(format!("--screenshot={}", path.display()));
    }
    command
        .arg("--dump-dom")
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("cannot start chromium");
    let stdout = collect(child.stdout.take().expect("piped stdout"));
    let stderr = collect(child.stderr.take().expect("piped stderr"));
    let deadline = Instant::now() + CHROMIUM_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("cannot wait for chromium") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium ran longer than {CHROMIUM_TIMEOUT:?} on {url}; stderr:\n{}",
                stderr.lock().expect("stderr lock")
            );
        }
        thread::sleep(Duration::from_millis(50));
    };
    // The reader threads finish once the pipes close; give them a moment.
    let pipes_closed = Instant::now() + Duration::from_secs(10);
    let dom = loop {
        let dom = stdout.lock().expect("stdout lock").clone();
        if dom.contains("</html>") || Instant::now() > pipes_closed {
            break dom;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let stderr = stderr.lock().expect("stderr lock").clone();
    assert!(
        status.success(),
        "chromium failed ({status}) on {url}; stderr:\n{stderr}"
    );
    assert!(
        dom.contains("</html>"),
        "chromium dumped no page for {url}: {dom:?}; stderr:\n{stderr}"
    );
    Rendered { dom, stderr }
}

// ---------------------------------------------------------------------------------------
// The dumped DOM
// ---------------------------------------------------------------------------------------

/// The DOM without script, style and comments, so only elements remain to be matched.
fn markup_only(dom: &str) -> String {
    let mut text = dom.to_string();
    for (open, close) in [
        ("<script", "</script>"),
        ("<style", "</style>"),
        ("<!--", "-->"),
    ] {
        while let Some(start) = text.find(open) {
            let end = text[start..]
                .find(close)
                .map_or(text.len(), |e| start + e + close.len());
            text.replace_range(start..end, "");
        }
    }
    text
}

/// One element of the DOM: its opening tag's attributes and the markup up to the next
/// element of the same name (enough for the flat cards of the page).
struct Element<'a> {
    tag: &'a str,
    inner: &'a str,
}

impl Element<'_> {
    fn attribute(&self, name: &str) -> Option<String> {
        let needle = format!(" {name}=\"");
        let start = self.tag.find(&needle)? + needle.len();
        let end = self.tag[start..].find('"')? + start;
        Some(
            self.tag[start..end]
                .replace("&quot;", "\"")
                .replace("&amp;", "&"),
        )
    }

    fn required(&self, name: &str) -> String {
        self.attribute(name)
            .unwrap_or_else(|| panic!("no {name} in <{}>", self.tag))
    }

    fn number(&self, name: &str) -> f64 {
        let text = self.required(name);
        text.parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number in <{}>", self.tag))
    }
}

/// Every element named `name` in `markup`.
fn elements<'a>(markup: &'a str, name: &str) -> Vec<Element<'a>> {
    let open = format!("<{name}");
    let mut starts: Vec<usize> = markup
        .match_indices(&open)
        .map(|(at, _)| at)
        .filter(|&at| markup[at + open.len()..].starts_with([' ', '>']))
        .collect();
    starts.push(markup.len());
    starts
        .windows(2)
        .map(|pair| {
            let tag_end = markup[pair[0]..].find('>').expect("unclosed tag") + pair[0];
            Element {
                tag: &markup[pair[0]..tag_end],
                inner: &markup[tag_end + 1..pair[1]],
            }
        })
        .collect()
}

/// What the page's `data-attribute-layers` should say of a replica in the admin API:
/// the names of the attributes every segment holds a layer of, sorted, comma-separated.
fn complete_attribute_layers(replica: &Value) -> String {
    let mut names: Vec<String> = replica["attribute_layers"]
        .as_array()
        .expect("attribute_layers")
        .iter()
        .filter(|row| {
            let segments = row["segments"].as_u64().expect("segments");
            segments > 0 && row["segments_held"].as_u64() == Some(segments)
        })
        .map(|row| {
            row["name"]
                .as_str()
                .unwrap_or_else(|| panic!("attribute layer without a name: {row}"))
                .to_string()
        })
        .collect();
    names.sort();
    names.join(",")
}

/// The text of the first element carrying `data-stat="{stat}"` in `markup`.
fn stat_text(markup: &str, stat: &str) -> String {
    let needle = format!("data-stat=\"{stat}\"");
    let start = markup
        .find(&needle)
        .unwrap_or_else(|| panic!("no {needle} in the card"));
    let text_start = markup[start..].find('>').expect("tag end") + start + 1;
    let text_end = markup[text_start..].find('<').expect("closing tag") + text_start;
    markup[text_start..text_end].to_string()
}

/// The text of the element with `id="{id}"` in `markup`.
fn text_of_id(markup: &str, id: &str) -> String {
    let needle = format!("id=\"{id}\"");
    let start = markup
        .find(&needle)
        .unwrap_or_else(|| panic!("no {needle} in the page"));
    let text_start = markup[start..].find('>').expect("tag end") + start + 1;
    let text_end = markup[text_start..].find('<').expect("closing tag") + text_start;
    markup[text_start..text_end].replace("&amp;", "&")
}

/// What a replica's plots must show: the server's samples up to the newest one drawn.
#[derive(Debug, PartialEq)]
struct Expected {
    points: usize,
    footprint_max: f64,
    queue_max: f64,
    rate_max: f64,
}

fn expected_from_history(samples: &[Value], newest_t: f64) -> Expected {
    let drawn: Vec<&Value> = samples
        .iter()
        .filter(|s| s["t_seconds"].as_f64().expect("t_seconds") <= newest_t)
        .collect();
    let max_of = |fields: &[&str]| {
        drawn
            .iter()
            .flat_map(|s| fields.iter().map(move |f| s[*f].as_f64().expect("number")))
            .fold(0.0, f64::max)
    };
    Expected {
        points: drawn.len(),
        footprint_max: max_of(&["footprint_bytes"]),
        queue_max: max_of(&["queue_length", "averaged_queue"]),
        rate_max: max_of(&[
            "request_per_second",
            "response_per_second",
            "refused_per_second",
        ]),
    }
}

// ---------------------------------------------------------------------------------------
// PNG
// ---------------------------------------------------------------------------------------

/// Width and height from a PNG's IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(
        bytes.len() > 24 && bytes.starts_with(b"\x89PNG\r\n\x1a\n") && &bytes[12..16] == b"IHDR",
        "not a PNG"
    );
    let word = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    (word(16), word(20))
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root")
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

/// Chromium runs one at a time: the machines have few cores.
static CHROMIUM: Mutex<()> = Mutex::new(());

#[test]
fn dashboard_page_is_served_self_contained() {
    let server = sample_server(&[]);
    let response = agent()
        .get(&format!("{}/", server.base))
        .call()
        .expect("GET /");
    assert!(
        response.content_type().starts_with("text/html"),
        "{}",
        response.content_type()
    );
    let policy = response
        .header("content-security-policy")
        .expect("a Content-Security-Policy header")
        .to_string();
    assert!(policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"));
    let page = response.into_string().expect("the page");
    assert!(page.contains("<title>PufferDB dashboard</title>"), "{page}");
    assert!(!page.contains("http://") && !page.contains("https://") && !page.contains("src="));
}

#[test]
fn dashboard_plots_a_running_load() {
    let Some(chromium) = skip_without_chromium() else {
        return;
    };
    let started = Instant::now();
    let server = sample_server(&[]);
    // A subspace for the page to list (answered once built).
    post_json(
        &agent(),
        &format!("{}/v1/admin/tables/bookings/subspaces", server.base),
        &json!({"attributes": ["country"], "regions": 4}),
    )
    .expect("add a subspace");
    let load = Load::start(&server.base, LOAD_THREADS);
    let load_started = Instant::now();
    wait_for_load_in_history(&server.base);
    thread::sleep(LOAD_BEFORE_PAGE.saturating_sub(load_started.elapsed()));

    let screenshot = workspace_root().join("target/dashboard-screenshot.png");
    std::fs::create_dir_all(screenshot.parent().expect("target")).expect("create target/");
    let _ = std::fs::remove_file(&screenshot);
    let before = get_json(
        &agent(),
        &format!("{}/v1/admin/replicas", server.base),
        None,
    )
    .expect("replicas");
    let subspaces_url = format!("{}/v1/admin/tables/bookings/subspaces", server.base);
    let subspaces_before = get_json(&agent(), &subspaces_url, None).expect("subspaces");
    let rendered = {
        let _one_at_a_time = CHROMIUM.lock().unwrap_or_else(|e| e.into_inner());
        render(&chromium, &format!("{}/", server.base), Some(&screenshot))
    };
    let load_report = load.finish();

    // The oracle: what the server reports after the page's last refresh.
    let agent = agent();
    let status =
        get_json(&agent, &format!("{}/v1/admin/replicas", server.base), None).expect("replicas");
    let history = get_json(
        &agent,
        &format!("{}/v1/admin/history?last_s=3600", server.base),
        None,
    )
    .expect("history");
    let status_replicas = status["replicas"].as_array().expect("replicas");
    let samples_by_id: BTreeMap<u64, &Vec<Value>> = history["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .map(|r| {
            let id = r["id"].as_u64().expect("id");
            (id, r["samples"].as_array().expect("samples"))
        })
        .collect();

    let markup = markup_only(&rendered.dom);
    let context = format!(
        "\nchromium stderr:\n{}\nDOM:\n{}",
        rendered.stderr, rendered.dom
    );
    let bodies = elements(&markup, "body");
    assert_eq!(bodies.len(), 1, "{context}");
    let body = &bodies[0];
    assert_eq!(body.required("data-state"), "ok", "{context}");
    // A single node: the page asked, and keeps the cluster section hidden.
    assert_eq!(body.required("data-cluster"), "single", "{context}");
    let updates = body.number("data-updates");
    assert!(updates >= 2.0, "only {updates} refreshes{context}");
    assert_eq!(
        body.number("data-replicas") as usize,
        status_replicas.len(),
        "{context}"
    );

    // One card per replica the server reports, with its table, shard and number.
    let cards = elements(&markup, "article");
    let shown: BTreeSet<(u64, String, u64, u64)> = cards
        .iter()
        .map(|card| {
            (
                card.number("data-replica-id") as u64,
                card.required("data-table"),
                card.number("data-shard") as u64,
                card.number("data-replica") as u64,
            )
        })
        .collect();
    let reported: BTreeSet<(u64, String, u64, u64)> = status_replicas
        .iter()
        .map(|r| {
            (
                r["id"].as_u64().expect("id"),
                r["table"].as_str().expect("table").to_string(),
                r["shard"].as_u64().expect("shard"),
                r["replica"].as_u64().expect("replica"),
            )
        })
        .collect();
    assert_eq!(cards.len(), status_replicas.len(), "{context}");
    assert_eq!(shown, reported, "{context}");
    assert!(
        reported.iter().any(|(_, table, _, _)| table == "bookings"),
        "no bookings replica: {status}"
    );

    // Every plot draws exactly the server's samples up to the newest one it drew.
    for card in &cards {
        let id = card.number("data-replica-id") as u64;
        let newest_t = card.number("data-newest-t");
        let samples = samples_by_id
            .get(&id)
            .unwrap_or_else(|| panic!("no history of replica {id}"));
        let expected = expected_from_history(samples, newest_t);
        let canvases = elements(card.inner, "canvas");
        let plot = |name: &str| {
            canvases
                .iter()
                .find(|c| c.attribute("data-plot").as_deref() == Some(name))
                .unwrap_or_else(|| panic!("replica {id} has no {name} plot{context}"))
        };
        let drawn = Expected {
            points: plot("footprint").number("data-points") as usize,
            footprint_max: plot("footprint").number("data-max"),
            queue_max: plot("queue").number("data-max"),
            rate_max: plot("rate").number("data-max"),
        };
        assert_eq!(canvases.len(), 3, "replica {id}{context}");
        for name in ["queue", "rate"] {
            assert_eq!(
                plot(name).number("data-points") as usize,
                drawn.points,
                "replica {id}"
            );
        }
        assert_eq!(
            drawn, expected,
            "replica {id}: the plots differ from the history"
        );
        assert!(drawn.points > 0, "replica {id} plots nothing{context}");
        assert!(drawn.footprint_max > 0.0, "replica {id}: no footprint");

        let api = status_replicas
            .iter()
            .find(|r| r["id"] == id)
            .expect("reported");
        let layers = stat_text(card.inner, "layers");
        let max_layers = api["max_layers"].as_u64().expect("max_layers");
        assert!(
            layers.ends_with(&format!(" of {max_layers}")),
            "replica {id}: layers {layers:?}, max {max_layers}"
        );
        // Attribute layers: the page's list equals the API's wherever the API gave the
        // same list before and after the page ran (a buy or a compaction in between
        // leaves nothing to compare).
        let shown = card.required("data-attribute-layers");
        let stat = stat_text(card.inner, "attributes");
        assert!(
            stat != "–" && !stat.is_empty(),
            "replica {id}: attributes not rendered"
        );
        let after_layers = complete_attribute_layers(api);
        let before_layers = before["replicas"]
            .as_array()
            .expect("replicas")
            .iter()
            .find(|r| r["id"] == id)
            .map(complete_attribute_layers);
        if before_layers.as_ref() == Some(&after_layers) {
            assert_eq!(
                shown, after_layers,
                "replica {id}: attribute layers ({stat})"
            );
        } else {
            eprintln!(
                "replica {id}: attribute layers changed while the page ran \
                 ({before_layers:?} -> {after_layers:?}); not compared"
            );
        }
        eprintln!("replica {id}: attribute layers shown: {stat}");
    }
    // The table's subspaces and the configurator's decision, as the API gave them before
    // and after the page ran (when those differ, nothing to compare).
    let subspaces_after = get_json(&agent, &subspaces_url, None).expect("subspaces");
    let line = elements(&markup, "p")
        .into_iter()
        .find(|p| p.attribute("data-subspaces-of").as_deref() == Some("bookings"))
        .unwrap_or_else(|| panic!("no subspace line for bookings{context}"));
    let names = |answer: &Value| {
        let mut names: Vec<String> = answer["subspaces"]
            .as_array()
            .expect("subspaces")
            .iter()
            .map(|s| s["name"].as_str().expect("name").to_string())
            .collect();
        names.sort();
        names.join(",")
    };
    let decision = |answer: &Value| {
        answer["configurator"]["decision"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let api_line = (names(&subspaces_after), decision(&subspaces_after));
    assert!(
        !api_line.0.is_empty(),
        "the subspace added: {subspaces_after}"
    );
    if (names(&subspaces_before), decision(&subspaces_before)) == api_line {
        assert_eq!(
            (
                line.required("data-subspaces"),
                line.required("data-decision")
            ),
            api_line,
            "the subspace line: {}",
            line.inner
        );
    } else {
        eprintln!("bookings' subspaces changed while the page ran; not compared");
    }
    let shown_line: String = line.inner.split("</p>").next().unwrap_or("").to_string();
    eprintln!("subspace line: {shown_line}");
    // The subspace's own table says whose subspace it is.
    let copies: Vec<String> = elements(&markup, "p")
        .iter()
        .filter(|p| {
            p.attribute("data-subspaces-of")
                .is_some_and(|t| t != "bookings")
        })
        .map(|p| p.inner.split("</p>").next().unwrap_or("").to_string())
        .collect();
    assert!(
        !copies.is_empty(),
        "no line for the subspace's table{context}"
    );
    for copy in &copies {
        assert!(copy.contains("subspace (country) of bookings"), "{copy}");
    }
    // The load shows: some bookings replica drew a positive rate.
    let rate_shown = cards
        .iter()
        .filter(|c| c.attribute("data-table").as_deref() == Some("bookings"))
        .flat_map(|c| elements(c.inner, "canvas"))
        .filter(|c| c.attribute("data-plot").as_deref() == Some("rate"))
        .map(|c| c.number("data-max"))
        .fold(0.0, f64::max);
    assert!(rate_shown > 0.0, "no request rate drawn{context}");

    let png = std::fs::read(&screenshot).expect("chromium saved no screenshot");
    assert_eq!(png_size(&png), (WINDOW_WIDTH, WINDOW_HEIGHT));
    // A blank page of this size compresses to a few KiB; cards and plots take far more.
    assert!(
        png.len() > 30_000,
        "the screenshot is {} bytes: blank?",
        png.len()
    );
    eprintln!(
        "dashboard: {updates} refreshes, {} replicas, {} gets and {} searches checked, \
         screenshot {} ({} bytes), {:.1} s",
        cards.len(),
        load_report.gets,
        load_report.searches,
        screenshot.display(),
        png.len(),
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn dashboard_asks_for_a_token_and_uses_one_from_the_fragment() {
    let Some(chromium) = skip_without_chromium() else {
        return;
    };
    let token = "dashboard-read-token";
    let server = sample_server(&[("PUFFER_READ_TOKEN", token)]);
    let (without, with) = {
        let _one_at_a_time = CHROMIUM.lock().unwrap_or_else(|e| e.into_inner());
        let without = render(&chromium, &format!("{}/", server.base), None);
        let with = render(&chromium, &format!("{}/#token={token}", server.base), None);
        (without, with)
    };

    let markup = markup_only(&without.dom);
    let body = &elements(&markup, "body")[0];
    assert_eq!(
        body.required("data-state"),
        "unauthorized",
        "{}",
        without.dom
    );
    assert_eq!(body.number("data-updates"), 0.0);
    let message = elements(&markup, "div")
        .into_iter()
        .find(|d| d.attribute("id").as_deref() == Some("message"))
        .expect("the message banner");
    assert!(message.attribute("hidden").is_none(), "{}", message.tag);
    assert!(
        message.inner.contains("requires a token"),
        "{}",
        message.inner
    );
    assert!(elements(&markup, "article").is_empty());

    let markup = markup_only(&with.dom);
    let body = &elements(&markup, "body")[0];
    assert_eq!(body.required("data-state"), "ok", "{}", with.dom);
    assert!(body.number("data-updates") >= 2.0, "{}", body.tag);
    let replicas = get_json(
        &agent(),
        &format!("{}/v1/admin/replicas", server.base),
        Some(token),
    )
    .expect("replicas with the token");
    assert_eq!(
        elements(&markup, "article").len(),
        replicas["replicas"].as_array().expect("replicas").len()
    );
}

#[test]
fn dashboard_shows_the_cluster_on_a_cluster_node() {
    let Some(chromium) = skip_without_chromium() else {
        return;
    };
    let Some(_) = puffer_cluster::etcd::LocalEtcd::binary() else {
        eprintln!(
            "\n*** SKIPPED dashboard_shows_the_cluster_on_a_cluster_node: no etcd binary ***\n"
        );
        assert!(
            std::env::var_os("PUFFER_REQUIRE_SERVICES").is_none(),
            "PUFFER_REQUIRE_SERVICES is set but etcd is missing"
        );
        return;
    };
    let dir = TempDir::new().expect("a temporary directory");
    let etcd = puffer_cluster::etcd::LocalEtcd::start(&dir.path().join("etcd")).expect("etcd");
    let port = |_| puffer_cluster::etcd::local::free_port().expect("a free port");
    let (http, rpc) = (port(0), port(1));
    let node = ServeProcess::start_listening(
        &dir.path().join("n1"),
        &format!("127.0.0.1:{http}"),
        &[
            "--etcd",
            &etcd.endpoint(),
            "--node-id",
            "n1",
            "--rpc-listen",
            &format!("127.0.0.1:{rpc}"),
            "--publish-interval-s",
            "1",
        ],
        &[],
    );
    let agent = agent();
    let cluster_url = format!("{}/v1/admin/cluster", node.base);
    // Leading ingest, with a table whose shards were published.
    let started = Instant::now();
    loop {
        let status = get_json(&agent, &cluster_url, None).expect("cluster status");
        if status["leads_ingest"] == json!(true) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "n1 never led ingest: {status}"
        );
        thread::sleep(Duration::from_millis(100));
    }
    post_json(
        &agent,
        &format!("{}/v1/tables", node.base),
        &json!({"name": "rooms", "key": "id", "attributes": [{"name": "city", "type": "string"}]}),
    )
    .expect("table created");
    let status = loop {
        let status = get_json(&agent, &cluster_url, None).expect("cluster status");
        if status["publishing"]["shards"].as_u64().unwrap_or(0) > 0 {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "nothing published: {status}"
        );
        thread::sleep(Duration::from_millis(200));
    };

    let rendered = {
        let _one_at_a_time = CHROMIUM.lock().unwrap_or_else(|e| e.into_inner());
        render(&chromium, &format!("{}/", node.base), None)
    };
    let markup = markup_only(&rendered.dom);
    let context = format!("\nstatus: {status}\nDOM:\n{}", rendered.dom);
    let body = &elements(&markup, "body")[0];
    assert_eq!(body.required("data-cluster"), "cluster", "{context}");
    let section = elements(&markup, "section")
        .into_iter()
        .find(|s| s.attribute("id").as_deref() == Some("cluster"))
        .expect("the cluster section");
    assert!(
        section.attribute("hidden").is_none(),
        "the section is hidden{context}"
    );
    // What the page shows is what the admin API says (leaders do not change here).
    assert_eq!(
        text_of_id(&markup, "cluster-name"),
        status["cluster"].as_str().unwrap(),
        "{context}"
    );
    assert_eq!(
        text_of_id(&markup, "cluster-node"),
        "n1 (coordinator, ingest, indexer, data, broker)",
        "{context}"
    );
    assert_eq!(text_of_id(&markup, "cluster-ingest"), "n1", "{context}");
    assert_eq!(
        text_of_id(&markup, "cluster-coordinator"),
        "n1",
        "{context}"
    );
    assert_eq!(
        text_of_id(&markup, "cluster-members"),
        "n1 [coordinator,ingest,indexer,data,broker]",
        "{context}"
    );
    let log = text_of_id(&markup, "cluster-log");
    let (tail, published) = log
        .split_once(" / ")
        .unwrap_or_else(|| panic!("{log:?}{context}"));
    assert!(
        tail.parse::<u64>().is_ok() && published.parse::<u64>().is_ok(),
        "{log:?}{context}"
    );
    assert_eq!(
        text_of_id(&markup, "cluster-reads"),
        "this node's own copy",
        "{context}"
    );
    let segments = text_of_id(&markup, "cluster-segments");
    assert!(segments.starts_with("published "), "{segments:?}{context}");
    // The placement: one row per shard, as the admin API has it.
    let placement =
        get_json(&agent, &format!("{}/v1/admin/placement", node.base), None).expect("placement");
    let shards = placement["shards"].as_array().expect("shards");
    let table = elements(&markup, "table")
        .into_iter()
        .find(|t| t.attribute("id").as_deref() == Some("placement"))
        .expect("the placement table");
    assert_eq!(
        table.required("data-rows"),
        shards.len().to_string(),
        "{context}"
    );
    let rows = elements(&markup, "tr");
    for shard in shards {
        let id = format!("{}/{}", shard["table"].as_str().unwrap(), shard["shard"]);
        assert!(
            rows.iter()
                .any(|r| r.attribute("data-shard").as_deref() == Some(id.as_str())),
            "no row for {id}{context}"
        );
    }
    assert!(
        text_of_id(&markup, "cluster-placement").starts_with(placement["policy"].as_str().unwrap()),
        "{placement}{context}"
    );
}
