//! `skiff get KIND [NAME...]`: server-side tables printed like kubectl, or the objects as
//! YAML, JSON or names; `-w` keeps printing as watch events arrive.

use std::time::{Duration, Instant};

use api::client::{resource_path, ListOptions, WatchEvent, ACCEPT_JSON, ACCEPT_TABLE};
use api::Kind;
use futures_lite::StreamExt as _;
use serde_json::{json, Value};

use super::table::{column_widths, format_line, Row, Table};
use super::{kind_label, resolve_kind, AlreadyReported, Session};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Wide,
    Yaml,
    Json,
    Name,
}

#[derive(Clone, Debug, clap::Args)]
pub struct GetArgs {
    /// The kind (`pods`, `po`, `deployments.apps`, ...), or KIND/NAME.
    pub kind: String,
    /// Names of the objects (all objects when none).
    pub names: Vec<String>,
    /// List across all namespaces.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Output>,
    /// Label selector, e.g. `app=web,tier!=db`.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Field selector, e.g. `status.phase=Running`.
    #[arg(long)]
    pub field_selector: Option<String>,
    /// After listing, keep printing changes.
    #[arg(short = 'w', long)]
    pub watch: bool,
}

/// What to fetch, worked out from the arguments.
#[derive(Debug)]
pub struct Query {
    pub kind: Kind,
    pub names: Vec<String>,
    /// None: all namespaces (or a cluster-scoped kind).
    pub namespace: Option<String>,
    pub with_namespace_column: bool,
    pub options: ListOptions,
}

pub fn plan(args: &GetArgs, default_namespace: &str) -> anyhow::Result<Query> {
    let (kind_name, mut names) = match args.kind.split_once('/') {
        Some((k, n)) => (k, vec![n.to_string()]),
        None => (args.kind.as_str(), Vec::new()),
    };
    names.extend(args.names.iter().cloned());
    let kind = resolve_kind(kind_name)?;
    let namespaced = kind.info().namespaced;
    if !names.is_empty() && args.all_namespaces {
        anyhow::bail!("a resource cannot be retrieved by name across all namespaces");
    }
    if !names.is_empty() && (args.selector.is_some() || args.field_selector.is_some()) {
        anyhow::bail!("selectors cannot be combined with names");
    }
    if args.watch && names.len() > 1 {
        anyhow::bail!("watch is only supported on a single resource");
    }
    let namespace = (namespaced && !args.all_namespaces).then(|| default_namespace.to_string());
    Ok(Query {
        kind,
        names,
        namespace,
        with_namespace_column: namespaced && args.all_namespaces,
        options: ListOptions {
            label_selector: args.selector.clone(),
            field_selector: args.field_selector.clone(),
            ..Default::default()
        },
    })
}

/// The kinds `get all` shows, in kubectl's order.
const ALL: &[Kind] = &[
    Kind::Pod,
    Kind::ReplicationController,
    Kind::Service,
    Kind::DaemonSet,
    Kind::Deployment,
    Kind::ReplicaSet,
    Kind::CronJob,
    Kind::Job,
];

pub async fn run(session: &Session, args: &GetArgs) -> anyhow::Result<()> {
    if args.kind == "all"
        && args.names.is_empty()
        && matches!(args.output, None | Some(Output::Wide))
        && !args.watch
    {
        return get_all(session, args).await;
    }
    let q = plan(args, &session.namespace)?;
    match args.output {
        None | Some(Output::Wide) => {
            tables(session, &q, args.output == Some(Output::Wide), args.watch).await
        }
        Some(out) => objects(session, &q, out, args.watch).await,
    }
}

/// `get all`: one table per kind of the `all` category that has objects, rows named
/// `kind/name` as kubectl prints them.
async fn get_all(session: &Session, args: &GetArgs) -> anyhow::Result<()> {
    let mut printed = false;
    for kind in ALL {
        let q = plan(
            &GetArgs {
                kind: kind.info().plural.to_string(),
                ..args.clone()
            },
            &session.namespace,
        )?;
        let path = format!(
            "{}{}",
            resource_path(q.kind, q.namespace.as_deref(), None),
            q.options.to_query(false)
        );
        let v = session
            .client
            .request("GET", &path, None, ACCEPT_TABLE)
            .await?
            .error_for_status()?
            .json()?;
        let Some(mut table) = Table::from_json(&v) else {
            continue;
        };
        if table.rows.is_empty() {
            continue;
        }
        let label = kind_label(*kind);
        for row in &mut table.rows {
            if let Some(first) = row.cells.first_mut() {
                *first = format!("{label}/{first}");
            }
        }
        if printed {
            println!();
        }
        let wide = args.output == Some(Output::Wide);
        print!("{}", table.render(wide, q.with_namespace_column, true));
        printed = true;
    }
    if !printed {
        no_resources(&plan(
            &GetArgs {
                kind: "pods".into(),
                ..args.clone()
            },
            &session.namespace,
        )?);
    }
    Ok(())
}

fn no_resources(q: &Query) {
    match &q.namespace {
        Some(ns) => eprintln!("No resources found in {ns} namespace."),
        None => eprintln!("No resources found"),
    }
}

async fn tables(session: &Session, q: &Query, wide: bool, watch: bool) -> anyhow::Result<()> {
    let client = &session.client;
    let ns = q.namespace.as_deref();
    let mut table = Table::default();
    let mut failed = 0;
    if q.names.is_empty() {
        let path = format!(
            "{}{}",
            resource_path(q.kind, ns, None),
            q.options.to_query(false)
        );
        let v = client
            .request("GET", &path, None, ACCEPT_TABLE)
            .await?
            .error_for_status()?
            .json()?;
        table = Table::from_json(&v).unwrap_or_else(|| {
            let items = v
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let mut t = Table::from_objects(&items);
            t.resource_version = str_at(&v, "/metadata/resourceVersion").to_string();
            t
        });
    } else {
        for name in &q.names {
            let path = resource_path(q.kind, ns, Some(name));
            let answer = client.request("GET", &path, None, ACCEPT_TABLE).await?;
            match answer.error_for_status().and_then(|r| r.json()) {
                Ok(v) => match Table::from_json(&v) {
                    Some(t) => {
                        if table.columns.is_empty() {
                            table.columns = t.columns;
                        }
                        table.resource_version = t.resource_version;
                        table.rows.extend(t.rows);
                    }
                    None => {
                        if table.columns.is_empty() {
                            table.columns = Table::from_objects(&[]).columns;
                        }
                        table.resource_version = str_at(&v, "/metadata/resourceVersion").into();
                        table.rows.push(Table::fallback_row(&v));
                    }
                },
                Err(e) => {
                    failed += 1;
                    eprintln!("error: {e}");
                }
            }
        }
    }
    let (header, rows) = table.lines(wide, q.with_namespace_column);
    let mut lines = vec![header.clone()];
    lines.extend(rows.iter().cloned());
    let mut widths = column_widths(&lines);
    let mut header_printed = false;
    if !rows.is_empty() {
        print!("{}", table.render(wide, q.with_namespace_column, true));
        header_printed = true;
    } else if q.names.is_empty() && !watch {
        no_resources(q);
    }
    if failed > 0 {
        return Err(AlreadyReported(failed).into());
    }
    if !watch {
        return Ok(());
    }

    let mut rv = table.resource_version.clone();
    loop {
        let started = Instant::now();
        let mut stream = client
            .watch_value(q.kind, ns, &watch_options(q, &rv), ACCEPT_TABLE)
            .await?;
        let mut events = 0;
        while let Some(ev) = stream.next().await {
            let ev = ev?;
            events += 1;
            let Some(obj) = ev.object() else {
                if let WatchEvent::Bookmark { resource_version } = &ev {
                    rv = resource_version.clone();
                }
                continue;
            };
            let rows: Vec<Row> = match Table::from_json(obj) {
                Some(t) => {
                    if table.columns.is_empty() || (table.rows.is_empty() && !t.columns.is_empty())
                    {
                        table.columns = t.columns.clone();
                    }
                    if !t.resource_version.is_empty() {
                        rv = t.resource_version.clone();
                    }
                    t.rows
                }
                None => {
                    if table.columns.is_empty() {
                        table.columns = Table::from_objects(&[]).columns;
                    }
                    rv = str_at(obj, "/metadata/resourceVersion").to_string();
                    vec![row_for_columns(&table, obj)]
                }
            };
            let shown = Table {
                columns: table.columns.clone(),
                rows,
                resource_version: String::new(),
            };
            let (header, rows) = shown.lines(wide, q.with_namespace_column);
            if !header_printed {
                let mut lines = vec![header.clone()];
                lines.extend(rows.iter().cloned());
                widths = column_widths(&lines);
                print!("{}", format_line(&header, &widths));
                header_printed = true;
            }
            for r in rows {
                print!("{}", format_line(&r, &widths));
            }
            use std::io::Write as _;
            std::io::stdout().flush()?;
        }
        // The server ended the watch (timeout): continue from where it was.
        if events == 0 && started.elapsed() < Duration::from_secs(1) {
            smol::Timer::after(Duration::from_secs(1)).await;
        }
    }
}

fn watch_options(q: &Query, rv: &str) -> ListOptions {
    let mut o = q.options.clone();
    if let Some(name) = q.names.first() {
        o.field_selector = Some(format!("metadata.name={name}"));
    }
    o.resource_version = Some(rv.to_string());
    o
}

/// A row for a plain object under server-provided columns: NAME and AGE are filled in.
fn row_for_columns(table: &Table, obj: &Value) -> Row {
    let fallback = Table::fallback_row(obj);
    let cells = table
        .columns
        .iter()
        .map(|c| match c.name.to_ascii_lowercase().as_str() {
            "name" => fallback.cells[0].clone(),
            "age" => fallback.cells[1].clone(),
            _ => "<unknown>".into(),
        })
        .collect();
    Row { cells, ..fallback }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// Adds `apiVersion` and `kind` where the server left them out (list items).
fn with_type(kind: Kind, mut v: Value) -> Value {
    if let Value::Object(m) = &mut v {
        let info = kind.info();
        m.entry("apiVersion")
            .or_insert_with(|| Value::String(info.api_version()));
        m.entry("kind")
            .or_insert_with(|| Value::String(info.kind.into()));
    }
    v
}

/// The value as printed by `-o yaml|json|name`.
pub fn format_object(kind: Kind, v: &Value, out: Output) -> String {
    match out {
        Output::Json => {
            let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
            s.push('\n');
            s
        }
        Output::Yaml => api::codec::to_yaml(v),
        Output::Name => {
            let items: Vec<&Value> = match v.get("items").and_then(Value::as_array) {
                Some(items) if v.get("kind").and_then(Value::as_str) == Some("List") => {
                    items.iter().collect()
                }
                _ => vec![v],
            };
            items
                .iter()
                .map(|o| format!("{}/{}\n", kind_label(kind), str_at(o, "/metadata/name")))
                .collect()
        }
        Output::Wide => String::new(),
    }
}

fn list_of(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}})
}

async fn objects(session: &Session, q: &Query, out: Output, watch: bool) -> anyhow::Result<()> {
    let client = &session.client;
    let ns = q.namespace.as_deref();
    let mut failed = 0;
    let (shown, rv) = if q.names.is_empty() {
        let list = client.list_value(q.kind, ns, &q.options).await?;
        let rv = str_at(&list, "/metadata/resourceVersion").to_string();
        let items: Vec<Value> = list
            .get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|i| with_type(q.kind, i))
            .collect();
        if items.is_empty() && out == Output::Name {
            if !watch {
                no_resources(q);
            }
            (None, rv)
        } else {
            (Some(list_of(items)), rv)
        }
    } else {
        let mut found = Vec::new();
        for name in &q.names {
            match client.get_value(q.kind, ns, name).await {
                Ok(v) => found.push(with_type(q.kind, v)),
                Err(e) => {
                    failed += 1;
                    eprintln!("error: {e}");
                }
            }
        }
        let rv = found
            .last()
            .map(|v| str_at(v, "/metadata/resourceVersion").to_string())
            .unwrap_or_default();
        let shown = match found.len() {
            0 => None,
            1 => found.pop(),
            _ => Some(list_of(found)),
        };
        (shown, rv)
    };
    if let Some(v) = &shown {
        print!("{}", format_object(q.kind, v, out));
    }
    if failed > 0 {
        return Err(AlreadyReported(failed).into());
    }
    if !watch {
        return Ok(());
    }
    let mut rv = rv;
    loop {
        let started = Instant::now();
        let mut stream = client
            .watch_value(q.kind, ns, &watch_options(q, &rv), ACCEPT_JSON)
            .await?;
        let mut events = 0;
        while let Some(ev) = stream.next().await {
            let ev = ev?;
            events += 1;
            match &ev {
                WatchEvent::Bookmark { resource_version } => rv = resource_version.clone(),
                _ => {
                    if let Some(obj) = ev.object() {
                        rv = str_at(obj, "/metadata/resourceVersion").to_string();
                        let obj = with_type(q.kind, obj.clone());
                        if out == Output::Yaml {
                            print!("---\n{}", format_object(q.kind, &obj, out));
                        } else {
                            print!("{}", format_object(q.kind, &obj, out));
                        }
                        use std::io::Write as _;
                        std::io::stdout().flush()?;
                    }
                }
            }
        }
        if events == 0 && started.elapsed() < Duration::from_secs(1) {
            smol::Timer::after(Duration::from_secs(1)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn get_args(args: &[&str]) -> GetArgs {
        let cli = super::super::Cli::try_parse_from(
            ["skiff", "get"].into_iter().chain(args.iter().copied()),
        )
        .unwrap();
        match cli.command {
            super::super::Command::Get(g) => g,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn plans_namespaces_and_names() {
        let q = plan(&get_args(&["po"]), "dev").unwrap();
        assert_eq!(q.kind, Kind::Pod);
        assert_eq!(q.namespace.as_deref(), Some("dev"));
        assert!(!q.with_namespace_column);

        let q = plan(&get_args(&["deploy", "-A", "-l", "app=web"]), "dev").unwrap();
        assert_eq!(q.namespace, None);
        assert!(q.with_namespace_column);
        assert_eq!(q.options.label_selector.as_deref(), Some("app=web"));

        let q = plan(&get_args(&["nodes", "-A"]), "dev").unwrap();
        assert_eq!(q.namespace, None);
        assert!(!q.with_namespace_column, "nodes are cluster-scoped");

        let q = plan(&get_args(&["pods/web", "db"]), "dev").unwrap();
        assert_eq!(q.names, ["web", "db"]);

        assert!(plan(&get_args(&["po", "x", "-A"]), "dev").is_err());
        assert!(plan(&get_args(&["po", "x", "-l", "a=b"]), "dev").is_err());
        assert!(plan(&get_args(&["widgets"]), "dev").is_err());
    }

    #[test]
    fn watch_of_one_name_uses_a_field_selector() {
        let q = plan(&get_args(&["po", "web", "-w"]), "dev").unwrap();
        let o = watch_options(&q, "12");
        assert_eq!(
            o.to_query(true),
            "?fieldSelector=metadata.name%3Dweb&resourceVersion=12&watch=true"
        );
    }

    #[test]
    fn objects_print_as_yaml_json_and_names() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}});
        assert_eq!(
            format_object(Kind::Pod, &pod, Output::Yaml),
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n"
        );
        assert!(format_object(Kind::Pod, &pod, Output::Json).starts_with("{\n  \"apiVersion\""));
        let list = list_of(vec![
            with_type(Kind::Deployment, json!({"metadata": {"name": "a"}})),
            json!({"metadata": {"name": "b"}}),
        ]);
        assert_eq!(list["items"][0]["kind"], "Deployment");
        assert_eq!(list["items"][0]["apiVersion"], "apps/v1");
        assert_eq!(
            format_object(Kind::Deployment, &list, Output::Name),
            "deployment.apps/a\ndeployment.apps/b\n"
        );
    }
}
