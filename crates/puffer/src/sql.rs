//! `puffer sql` and `puffer status`: talk to a running server (`--url`), or open the data
//! directory directly when no server runs.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{bail, Context};
use puffer_node::Database;
use puffer_query::Statement;
use serde_json::{json, Value};

/// Where statements go.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// URL of a running server, e.g. http://127.0.0.1:7878.
    #[arg(long, conflicts_with = "data")]
    url: Option<String>,
    /// Data directory to open directly (default ./puffer-data) when no --url is given.
    #[arg(long)]
    data: Option<PathBuf>,
}

/// Arguments of `puffer sql`.
#[derive(Debug, clap::Args)]
pub struct SqlArgs {
    #[command(flatten)]
    target: Target,
    /// Run this statement and exit (otherwise an interactive shell reads stdin).
    #[arg(short = 'e', long = "execute")]
    execute: Option<String>,
    /// Print answers as JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// A connection: HTTP or an open database.
enum Session {
    Http(String),
    Direct(std::sync::Arc<Database>),
}

impl Session {
    fn open(target: &Target) -> anyhow::Result<Session> {
        if let Some(url) = &target.url {
            return Ok(Session::Http(url.trim_end_matches('/').to_string()));
        }
        let dir = target
            .data
            .clone()
            .unwrap_or_else(|| PathBuf::from("puffer-data"));
        let db = Database::open(&dir, Default::default())
            .with_context(|| format!("opening the data directory {}", dir.display()))?;
        Ok(Session::Direct(std::sync::Arc::new(db)))
    }

    fn sql(&self, query: &str) -> anyhow::Result<Value> {
        match self {
            Session::Http(url) => http_post(&format!("{url}/v1/sql"), &json!({"query": query})),
            Session::Direct(db) => {
                let statement = match puffer_query::sql::parse(query, db.as_ref()) {
                    Err(error) if puffer_analytics::takes(&error, query) => {
                        let options = puffer_analytics::AnalyticsOptions::default();
                        let answer = puffer_analytics::run(db, query, None, &options)?;
                        return Ok(puffer_server::values::answer_json(&answer, None));
                    }
                    parsed => parsed?,
                };
                let schema = match &statement {
                    Statement::Select(select) => Some(db.table(&select.table)?.schema()),
                    _ => None,
                };
                let answer = db.execute(statement)?;
                Ok(puffer_server::values::answer_json(
                    &answer,
                    schema.as_deref(),
                ))
            }
        }
    }
}

fn http_post(url: &str, body: &Value) -> anyhow::Result<Value> {
    match ureq::post(url).send_json(body.clone()) {
        Ok(response) => Ok(response.into_json()?),
        Err(ureq::Error::Status(status, response)) => {
            let error: Value = response.into_json().unwrap_or(Value::Null);
            bail!(
                "{status} {}: {}",
                error["code"].as_str().unwrap_or("error"),
                error["message"].as_str().unwrap_or("")
            )
        }
        Err(e) => bail!("cannot reach {url}: {e}"),
    }
}

fn http_get(url: &str) -> anyhow::Result<Value> {
    match ureq::get(url).call() {
        Ok(response) => Ok(response.into_json()?),
        Err(e) => bail!("cannot reach {url}: {e}"),
    }
}

fn cell(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Renders an answer: rows as an aligned table, anything else as compact JSON.
fn render(answer: &Value, out: &mut impl Write) -> std::io::Result<()> {
    let (Some(columns), Some(rows)) = (answer["columns"].as_array(), answer["rows"].as_array())
    else {
        return writeln!(out, "{answer}");
    };
    let columns: Vec<String> = columns.iter().map(|c| cell(Some(c))).collect();
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|row| columns.iter().map(|c| cell(row.get(c))).collect())
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            table
                .iter()
                .map(|r| r[i].chars().count())
                .chain([c.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    writeln!(out, "{}", line(&columns))?;
    writeln!(
        out,
        "{}",
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("-+-")
    )?;
    for row in &table {
        writeln!(out, "{}", line(row))?;
    }
    let snapshot = &answer["snapshot"];
    writeln!(
        out,
        "({} rows{}; snapshot {}, age {:.0} ms)",
        table.len(),
        if answer["truncated"] == Value::Bool(true) {
            ", more exist"
        } else {
            ""
        },
        snapshot["seq"],
        snapshot["age_ms"].as_f64().unwrap_or(0.0)
    )
}

/// Runs `puffer sql`.
pub fn run(args: SqlArgs) -> anyhow::Result<()> {
    let session = Session::open(&args.target)?;
    let stdout = std::io::stdout();
    let print = |answer: &Value| -> anyhow::Result<()> {
        let mut out = stdout.lock();
        if args.json {
            writeln!(out, "{answer}")?;
        } else {
            render(answer, &mut out)?;
        }
        Ok(())
    };
    if let Some(query) = &args.execute {
        return print(&session.sql(query)?);
    }
    if std::io::stdin().is_terminal() {
        return shell(&session, &print);
    }
    // Statements piped in: one per line.
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let query = line.trim().trim_end_matches(';');
        if !query.is_empty() {
            match session.sql(query) {
                Ok(answer) => print(&answer)?,
                Err(e) => eprintln!("error: {e:#}"),
            }
        }
    }
    Ok(())
}

/// Where the shell keeps its history.
fn history_path() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".puffer_history"))
}

/// The interactive shell: line editing and a history kept across sessions; a
/// statement ends with `;` or at the end of a line.
fn shell(session: &Session, print: &dyn Fn(&Value) -> anyhow::Result<()>) -> anyhow::Result<()> {
    let mut editor = rustyline::DefaultEditor::new()?;
    let history = history_path();
    if let Some(path) = &history {
        let _ = editor.load_history(path); // none yet on the first run
    }
    eprintln!("PufferDB SQL shell: statements end with ';' or a newline; 'quit' leaves.");
    loop {
        let line = match editor.readline("puffer> ") {
            Ok(line) => line,
            Err(rustyline::error::ReadlineError::Interrupted) => continue,
            Err(rustyline::error::ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        };
        let query = line.trim().trim_end_matches(';');
        if matches!(query, "quit" | "exit" | "\\q") {
            break;
        }
        if query.is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(line.trim());
        match session.sql(query) {
            Ok(answer) => print(&answer)?,
            Err(e) => eprintln!("error: {e:#}"),
        }
    }
    if let Some(path) = &history {
        if let Err(e) = editor.save_history(path) {
            eprintln!(
                "warning: could not save the history to {}: {e}",
                path.display()
            );
        }
    }
    Ok(())
}

/// Arguments of `puffer status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    target: Target,
    /// Print JSON only (tables and the node's replicas), without the readable table.
    #[arg(long)]
    json: bool,
}

/// Runs `puffer status`: tables, their stages and sizes, and every shard replica's
/// layers, footprint, averaged queue and response rate; a readable table, then JSON.
pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    let answer = match Session::open(&args.target)? {
        Session::Http(url) => {
            let tables = http_get(&format!("{url}/v1/tables"))?;
            let node = http_get(&format!("{url}/v1/admin/replicas"))?;
            let cluster = http_get(&format!("{url}/v1/admin/cluster"))?;
            json!({"tables": tables["tables"], "node": node, "cluster": cluster})
        }
        Session::Direct(db) => {
            let mut tables = Vec::new();
            for name in db.table_names() {
                let table = db.table(&name)?;
                let stats = table.stats()?;
                let marks = table.watermarks()?;
                let layout = table.layout();
                tables.push(json!({
                    "name": name,
                    "shards": layout.shards,
                    "replicas": layout.replicas,
                    "records_in_segments": stats.segment_records,
                    "disk_bytes": stats.disk_bytes,
                    "memory_bytes": stats.memory_bytes,
                    "segments": stats.segments,
                    "sorted_batches": stats.sorted_batches,
                    "log_tables": stats.log_tables,
                    "watermarks": {"published": marks.published, "sorted": marks.sorted, "compressed": marks.compressed},
                }));
            }
            json!({"tables": tables, "node": db.node().status()})
        }
    };
    if !args.json {
        print_cluster(&answer["cluster"]);
        print_replicas(&answer["node"]);
    }
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(())
}

/// The cluster as the node asked sees it: nodes, roles, leaders, the log, routing.
/// Nothing for a single node.
fn print_cluster(cluster: &Value) {
    if cluster["mode"] != "cluster" {
        return;
    }
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let roles = |v: &Value| {
        v.as_array()
            .map(|r| r.iter().map(text).collect::<Vec<_>>().join(","))
            .unwrap_or_default()
    };
    println!(
        "cluster {}: asked node {} ({}); ingest leader {}, coordinator leader {}",
        text(&cluster["cluster"]),
        text(&cluster["node_id"]),
        roles(&cluster["roles"]),
        text(&cluster["ingest_leader"]),
        text(&cluster["coordinator_leader"]),
    );
    println!(
        "log tail {}, published here {}, deep storage {}",
        text(&cluster["log_tail"]),
        text(&cluster["published"]),
        text(&cluster["deep_storage"])
    );
    let row = |cells: [String; 5]| {
        println!(
            "{:<16} {:<36} {:<22} {:<22} {:>18}",
            cells[0], cells[1], cells[2], cells[3], cells[4]
        );
    };
    row(["node", "roles", "http", "grpc", "lease"].map(String::from));
    for member in cluster["members"].as_array().into_iter().flatten() {
        row([
            text(&member["node_id"]),
            roles(&member["roles"]),
            text(&member["http_address"]),
            text(&member["rpc_address"]),
            text(&member["lease"]),
        ]);
    }
    if cluster["placement"].is_null() && cluster["mode"] == "cluster" {
        println!("placement: none yet (the coordinator leader makes it)");
    }
    if let Some(per_node) = cluster["placement"]["shards_per_node"].as_object() {
        let shards: Vec<String> = per_node
            .iter()
            .map(|(node, count)| format!("{node} {}", text(count)))
            .collect();
        println!(
            "placement ({} replicas of each shard): {}",
            text(&cluster["placement"]["replicas"]),
            if shards.is_empty() {
                "no shards yet".to_string()
            } else {
                shards.join(", ")
            }
        );
    }
    if let Some(holding) = cluster["holding"].as_object() {
        let held: Vec<String> = holding["held"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(table, shards)| {
                let shards: Vec<String> =
                    shards.as_array().into_iter().flatten().map(&text).collect();
                format!("{table} [{}]", shards.join(" "))
            })
            .collect();
        println!(
            "holds the shards placed here: {} ({} taken on, {} let go){}",
            if held.is_empty() {
                "no table yet".to_string()
            } else {
                held.join(", ")
            },
            text(&holding["taken_on"]),
            text(&holding["released"]),
            holding["error"]
                .as_str()
                .map(|e| format!("; last error: {e}"))
                .unwrap_or_default()
        );
    }
    if let Some(gc) = cluster["log_gc"]
        .as_object()
        .filter(|gc| gc["rounds"].as_u64().unwrap_or(0) > 0)
    {
        println!(
            "log kept from SCU {} ({} groups collected)",
            text(&gc["first_kept"]),
            text(&gc["groups"])
        );
    }
    println!("reads: {}", text(&cluster["reads"]["from"]));
    for node in cluster["reads"]["data_nodes"]
        .as_array()
        .into_iter()
        .flatten()
    {
        println!(
            "  -> {} at {}: queue {}{}",
            text(&node["node_id"]),
            text(&node["rpc_address"]),
            text(&node["queue_length"]),
            if node["skipped"] == true {
                " (skipped after a failure)"
            } else {
                ""
            }
        );
    }
    println!();
}

fn print_replicas(node: &Value) {
    let mib = |v: &Value| v.as_f64().unwrap_or(0.0) / (1024.0 * 1024.0);
    println!(
        "node: {:.1} MiB of {:.1} MiB budget, {} construction, layer manager {}",
        mib(&node["memory_used_bytes"]),
        mib(&node["memory_budget_bytes"]),
        node["construction"].as_str().unwrap_or("?"),
        if node["automatic"].as_bool().unwrap_or(false) {
            "on"
        } else {
            "off"
        }
    );
    println!(
        "{:>4} {:<20} {:>5} {:>7} {:>9} {:>11} {:>7} {:>10} {:>10} {:>6}",
        "id",
        "table",
        "shard",
        "replica",
        "layers",
        "footprint",
        "queue",
        "avg queue",
        "resp/s",
        "pinned"
    );
    for r in node["replicas"].as_array().into_iter().flatten() {
        println!(
            "{:>4} {:<20} {:>5} {:>7} {:>9} {:>9.2}Mi {:>7} {:>10.2} {:>10.0} {:>6}",
            r["id"],
            r["table"].as_str().unwrap_or("?"),
            r["shard"],
            r["replica"],
            format!("{}/{}", r["layers"], r["max_layers"]),
            mib(&r["footprint_bytes"]),
            r["queue_length"],
            r["averaged_queue"].as_f64().unwrap_or(0.0),
            r["response_per_second"].as_f64().unwrap_or(0.0),
            r["pinned"].as_bool().unwrap_or(false)
        );
    }
}

/// Arguments of `puffer layer`.
#[derive(Debug, clap::Args)]
pub struct LayerArgs {
    /// `add` or `drop` a sample layer (pins the replica: the layer manager leaves it
    /// alone), or `auto` to hand it back to the layer manager. With `--attribute`:
    /// `keep` or `drop` that attribute's layers whatever the demand, or `auto`.
    #[arg(value_parser = ["add", "drop", "keep", "auto"])]
    action: String,
    /// The replica's id (see `puffer status`).
    #[arg(long)]
    replica: u64,
    /// An attribute: act on its attribute layers instead of the sample layers.
    #[arg(long)]
    attribute: Option<String>,
    /// With `--attribute`: act on its column layers (for scans) instead.
    #[arg(long, requires = "attribute")]
    column: bool,
    /// URL of the running server.
    #[arg(long)]
    url: String,
}

/// Runs `puffer layer add|drop|auto --replica ID --url URL` (sample layers) or
/// `puffer layer keep|drop|auto --replica ID --attribute NAME [--column] --url URL`
/// (attribute or column layers) against a running server (layers live in the server's memory, so there is
/// no embedded form).
pub fn layer(args: LayerArgs) -> anyhow::Result<()> {
    let url = args.url.trim_end_matches('/');
    let (route, body) = match (&args.attribute, args.action.as_str()) {
        (None, "keep") => anyhow::bail!("`keep` is for attribute layers: give --attribute NAME"),
        (Some(_), "add") => anyhow::bail!(
            "attribute layers are kept, dropped or handed back (`keep`, `drop`, `auto`), not added"
        ),
        (None, action) => ("layers", json!({ "action": action })),
        (Some(attribute), action) => (
            "attribute-layers",
            json!({
                "attribute": attribute,
                "action": action,
                "kind": if args.column { "column" } else { "attribute" },
            }),
        ),
    };
    let answer = http_post(
        &format!("{url}/v1/admin/replicas/{}/{route}", args.replica),
        &body,
    )?;
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(())
}
