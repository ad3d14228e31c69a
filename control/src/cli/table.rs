//! Server-side tables (`meta.k8s.io/v1` Table) printed the way kubectl prints them.

use serde_json::Value;

/// One column of a table.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub name: String,
    pub priority: i64,
}

/// One row: its cells as text, and the object it shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub cells: Vec<String>,
    pub namespace: String,
    pub name: String,
}

/// A table as kubectl shows it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Table {
    pub columns: Vec<Column>,
    pub rows: Vec<Row>,
    pub resource_version: String,
}

/// Text of a cell value.
fn cell_text(v: &Value) -> String {
    match v {
        Value::Null => "<none>".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => other.to_string(),
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

impl Table {
    /// Reads a `Table` answer; None if `v` is not a Table (the server answered plain JSON).
    pub fn from_json(v: &Value) -> Option<Table> {
        if v.get("kind").and_then(Value::as_str) != Some("Table") {
            return None;
        }
        let columns = v
            .get("columnDefinitions")
            .and_then(Value::as_array)
            .map(|cols| {
                cols.iter()
                    .map(|c| Column {
                        name: str_at(c, "/name").to_string(),
                        priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let rows = v
            .get("rows")
            .and_then(Value::as_array)
            .map(|rows| {
                rows.iter()
                    .map(|r| Row {
                        cells: r
                            .get("cells")
                            .and_then(Value::as_array)
                            .map(|c| c.iter().map(cell_text).collect())
                            .unwrap_or_default(),
                        namespace: str_at(r, "/object/metadata/namespace").to_string(),
                        name: str_at(r, "/object/metadata/name").to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(Table {
            columns,
            rows,
            resource_version: str_at(v, "/metadata/resourceVersion").to_string(),
        })
    }

    /// The table kubectl shows for objects without a server-side table: NAME and AGE.
    pub fn from_objects(items: &[Value]) -> Table {
        Table {
            columns: vec![
                Column {
                    name: "Name".into(),
                    priority: 0,
                },
                Column {
                    name: "Age".into(),
                    priority: 0,
                },
            ],
            rows: items.iter().map(Table::fallback_row).collect(),
            resource_version: String::new(),
        }
    }

    /// A NAME/AGE row for a plain object.
    pub fn fallback_row(object: &Value) -> Row {
        let name = str_at(object, "/metadata/name").to_string();
        let age = match api::meta::Time::parse(str_at(object, "/metadata/creationTimestamp")) {
            Ok(t) => api::table::human_duration(t.age()),
            Err(_) => "<unknown>".into(),
        };
        Row {
            cells: vec![name.clone(), age],
            namespace: str_at(object, "/metadata/namespace").to_string(),
            name,
        }
    }

    fn visible(&self, wide: bool) -> Vec<usize> {
        self.columns
            .iter()
            .enumerate()
            .filter(|(_, c)| wide || c.priority <= 0)
            .map(|(i, _)| i)
            .collect()
    }

    /// The header line's cells and each row's cells, as printed.
    pub fn lines(&self, wide: bool, with_namespace: bool) -> (Vec<String>, Vec<Vec<String>>) {
        let visible = self.visible(wide);
        let mut header: Vec<String> = Vec::new();
        if with_namespace {
            header.push("NAMESPACE".into());
        }
        header.extend(visible.iter().map(|&i| self.columns[i].name.to_uppercase()));
        let rows = self
            .rows
            .iter()
            .map(|r| {
                let mut cells = Vec::new();
                if with_namespace {
                    cells.push(r.namespace.clone());
                }
                cells.extend(
                    visible
                        .iter()
                        .map(|&i| r.cells.get(i).cloned().unwrap_or_default()),
                );
                cells
            })
            .collect();
        (header, rows)
    }

    /// The whole table as kubectl prints it (header included when `header`).
    pub fn render(&self, wide: bool, with_namespace: bool, header: bool) -> String {
        let (head, rows) = self.lines(wide, with_namespace);
        let mut all = Vec::new();
        if header {
            all.push(head);
        }
        all.extend(rows);
        let widths = column_widths(&all);
        all.iter()
            .map(|cells| format_line(cells, &widths))
            .collect()
    }
}

/// kubectl's tabwriter settings: minimum cell width 6, padding 3.
const MIN_WIDTH: usize = 6;
const PADDING: usize = 3;

/// The width of each column but the last (which is never padded).
pub fn column_widths(lines: &[Vec<String>]) -> Vec<usize> {
    let n = lines.iter().map(Vec::len).max().unwrap_or(0);
    (0..n)
        .map(|i| {
            let longest = lines
                .iter()
                .filter_map(|l| l.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0);
            (longest + PADDING).max(MIN_WIDTH)
        })
        .collect()
}

/// One line, each cell but the last padded to its column's width.
pub fn format_line(cells: &[String], widths: &[usize]) -> String {
    let mut out = String::new();
    for (i, c) in cells.iter().enumerate() {
        if i + 1 == cells.len() {
            out.push_str(c);
        } else {
            let w = widths.get(i).copied().unwrap_or(MIN_WIDTH);
            let len = c.chars().count();
            out.push_str(c);
            out.push_str(&" ".repeat(w.saturating_sub(len).max(PADDING.min(w))));
        }
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pods_table() -> Value {
        json!({
            "kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": "42"},
            "columnDefinitions": [
                {"name": "Name", "type": "string", "priority": 0},
                {"name": "Ready", "type": "string", "priority": 0},
                {"name": "Status", "type": "string", "priority": 0},
                {"name": "Restarts", "type": "integer", "priority": 0},
                {"name": "Age", "type": "string", "priority": 0},
                {"name": "IP", "type": "string", "priority": 1},
                {"name": "Node", "type": "string", "priority": 1}
            ],
            "rows": [
                {"cells": ["web-7d4b9c-abcde", "1/1", "Running", 0, "5m", "10.42.0.7", "pi-1"],
                 "object": {"kind": "PartialObjectMetadata", "metadata": {"name": "web-7d4b9c-abcde", "namespace": "default"}}},
                {"cells": ["db", "0/1", "Pending", 12, "3h", null, null],
                 "object": {"kind": "PartialObjectMetadata", "metadata": {"name": "db", "namespace": "kube-system"}}}
            ]
        })
    }

    #[test]
    fn default_output_is_aligned_like_kubectl() {
        let t = Table::from_json(&pods_table()).unwrap();
        assert_eq!(t.resource_version, "42");
        assert_eq!(
            t.render(false, false, true),
            "NAME               READY   STATUS    RESTARTS   AGE\n\
             web-7d4b9c-abcde   1/1     Running   0          5m\n\
             db                 0/1     Pending   12         3h\n"
        );
    }

    #[test]
    fn wide_adds_priority_columns_and_all_namespaces_adds_namespace_first() {
        let t = Table::from_json(&pods_table()).unwrap();
        assert_eq!(
            t.render(true, true, true),
            "NAMESPACE     NAME               READY   STATUS    RESTARTS   AGE   IP          NODE\n\
             default       web-7d4b9c-abcde   1/1     Running   0          5m    10.42.0.7   pi-1\n\
             kube-system   db                 0/1     Pending   12         3h    <none>      <none>\n"
        );
    }

    #[test]
    fn plain_objects_get_name_and_age() {
        let created = api::meta::Time::from_system(
            std::time::SystemTime::now() - std::time::Duration::from_secs(90),
        );
        let t = Table::from_objects(&[
            json!({"metadata": {"name": "a", "creationTimestamp": created.to_string()}}),
        ]);
        assert_eq!(t.render(false, false, true), "NAME   AGE\na      90s\n");
        assert!(Table::from_json(&json!({"kind": "PodList"})).is_none());
    }
}
