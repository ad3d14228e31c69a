//! Node heartbeats live in memory: a status write that changes nothing but the conditions'
//! `lastHeartbeatTime` is answered without touching the disk (SD cards last longer), and reads
//! of Nodes show the latest heartbeat. The node lifecycle controller reads them from here.

use std::collections::HashMap;
use std::sync::Mutex;

use api::core::Node;
use api::meta::Time;

#[derive(Default)]
pub struct Heartbeats {
    latest: Mutex<HashMap<String, Time>>,
}

impl Heartbeats {
    pub fn record(&self, node: &str, at: Time) {
        let mut m = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        let slot = m.entry(node.to_string()).or_insert(at);
        if at > *slot {
            *slot = at;
        }
    }

    /// The latest heartbeat of `node` held in memory.
    pub fn latest(&self, node: &str) -> Option<Time> {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .copied()
    }

    pub fn forget(&self, node: &str) {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(node);
    }

    /// Shows the in-memory heartbeat on a Node read from the store.
    pub fn overlay(&self, node: &mut Node) {
        if let Some(at) = self.latest(&node.metadata.name) {
            for c in &mut node.status.conditions {
                if c.last_heartbeat_time.is_none_or(|t| t < at) {
                    c.last_heartbeat_time = Some(at);
                }
            }
        }
    }
}

/// The newest heartbeat in `new` if it differs from `old` only in heartbeat times.
pub fn heartbeat_only(old: &Node, new: &Node) -> Option<Time> {
    let strip = |n: &Node| {
        let mut n = n.clone();
        for c in &mut n.status.conditions {
            c.last_heartbeat_time = None;
        }
        n
    };
    if strip(old) != strip(new) {
        return None;
    }
    new.status
        .conditions
        .iter()
        .filter_map(|c| c.last_heartbeat_time)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::core::NodeCondition;

    fn node(beat: i64, status: &str) -> Node {
        let mut n = Node::default();
        n.metadata.name = "n".into();
        n.status.conditions.push(NodeCondition {
            type_: "Ready".into(),
            status: status.into(),
            last_heartbeat_time: Some(Time(beat)),
            ..Default::default()
        });
        n
    }

    #[test]
    fn only_heartbeat_changes_are_recognised_and_overlaid() {
        assert_eq!(
            heartbeat_only(&node(1, "True"), &node(5, "True")),
            Some(Time(5))
        );
        assert_eq!(heartbeat_only(&node(1, "True"), &node(5, "False")), None);
        let beats = Heartbeats::default();
        beats.record("n", Time(9));
        beats.record("n", Time(7));
        let mut n = node(1, "True");
        beats.overlay(&mut n);
        assert_eq!(n.status.conditions[0].last_heartbeat_time, Some(Time(9)));
    }
}
