//! One line of `CLUSTER NODES`, as the cluster harness reads it: who serves which slots, who
//! replicates whom, and who is failing.
//!
//! Read from the text rather than `CLUSTER SLOTS` because it also shows what `CLUSTER SLOTS`
//! leaves out: failed nodes, replicas without slots, and links still in handshake, which is
//! what "the cluster has settled" and "the failover happened" are about. Over a plaintext
//! connection, a node of a TLS cluster (7.0) shows the plaintext ports, the ones the harness
//! knows its servers by.

/// One node as another node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterNode {
    /// The node id (40 hex digits).
    pub(crate) id: String,
    /// The client port (plaintext, when asked over plaintext).
    pub(crate) port: u16,
    /// `myself`, `master`, `slave`, `fail?`, `fail`, `handshake`, `noaddr`, …
    pub(crate) flags: Vec<String>,
    /// The id of the master it replicates, for a replica.
    pub(crate) master_id: Option<String>,
    /// Whether the cluster bus link to it is `connected`.
    pub(crate) connected: bool,
    /// The slot ranges it serves (inclusive), migrating/importing markers left out.
    pub(crate) slots: Vec<(u16, u16)>,
}

impl ClusterNode {
    /// Parses the whole `CLUSTER NODES` text; lines it cannot read are left out.
    pub(crate) fn parse_all(text: &str) -> Vec<ClusterNode> {
        text.lines().filter_map(ClusterNode::parse).collect()
    }

    /// Parses one line: `<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent>
    /// <pong-recv> <config-epoch> <link-state> <slot> <slot> …`.
    fn parse(line: &str) -> Option<ClusterNode> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            return None;
        }
        let address = fields[1].split(['@', ',']).next()?;
        let port = address.rsplit_once(':')?.1.parse().ok()?;
        let slots = fields[8..]
            .iter()
            .filter(|s| !s.starts_with('['))
            .filter_map(|s| match s.split_once('-') {
                Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                None => s.parse().ok().map(|one| (one, one)),
            })
            .collect();
        Some(ClusterNode {
            id: fields[0].to_owned(),
            port,
            flags: fields[2].split(',').map(str::to_owned).collect(),
            master_id: (fields[3] != "-").then(|| fields[3].to_owned()),
            connected: fields[7] == "connected",
            slots,
        })
    }

    /// Whether it has `flag` (`master`, `myself`, `fail`, …).
    pub(crate) fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    /// Whether it is a master believed healthy: not failing, not in handshake.
    pub(crate) fn is_healthy_master(&self) -> bool {
        self.has("master") && self.is_healthy()
    }

    /// Whether nothing is wrong with it: no `fail`, `fail?`, `handshake` or `noaddr` flag,
    /// and its link connected.
    pub(crate) fn is_healthy(&self) -> bool {
        self.connected
            && !self
                .flags
                .iter()
                .any(|f| matches!(f.as_str(), "fail" | "fail?" | "handshake" | "noaddr"))
    }

    /// Whether it serves `slot`.
    pub(crate) fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }
}

#[cfg(test)]
mod tests {
    use super::ClusterNode;

    #[test]
    fn reads_slots_flags_and_replicas() {
        let text = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
e7d1 127.0.0.1:30001@40001,host myself,master - 0 0 1 connected 0-5460 7000 [5461->-abcd]
9d2f 127.0.0.1:30002@40002 master,fail - 1426238316232 1426238315000 2 disconnected
";
        let nodes = ClusterNode::parse_all(text);
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].master_id.as_deref(), Some("e7d1"));
        assert!(nodes[0].is_healthy() && !nodes[0].is_healthy_master());
        assert_eq!(nodes[1].port, 30001);
        assert_eq!(nodes[1].slots, [(0, 5460), (7000, 7000)]);
        assert!(nodes[1].serves(7000) && !nodes[1].serves(5461));
        assert!(nodes[1].has("myself") && nodes[1].is_healthy_master());
        assert!(!nodes[2].is_healthy());
    }
}
