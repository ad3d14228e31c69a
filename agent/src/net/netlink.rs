//! A small synchronous rtnetlink client (links, addresses, routes) on `netlink-sys` and
//! `netlink-packet-route`, the crates libcontainer already pulls in. Every call blocks on the
//! socket: use it from a blocking thread (`smol::unblock`), never on an executor thread. A
//! socket talks to the network namespace of the thread that opened it.

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;

use netlink_packet_core::{
    NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE,
    NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{
    InfoBridgePort, InfoData, InfoKind, InfoPortData, InfoPortKind, InfoVeth, LinkAttribute,
    LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::protocols::NETLINK_ROUTE;
use netlink_sys::Socket;

use api::cidr::Ipv4Cidr;

/// The `protocol` skiff marks its routes with (free in `/etc/iproute2/rt_protos`), so that it
/// can tell its own routes from everyone else's.
pub const SKIFF_ROUTE_PROTOCOL: u8 = 0x5f;

/// A netlink request failed.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    #[error("netlink socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("{what}: {errno}")]
    Kernel { what: String, errno: nix::Error },
    #[error("netlink: cannot decode the kernel's answer: {0}")]
    Decode(String),
}

impl NetlinkError {
    /// The kernel's errno, if the kernel refused.
    pub fn errno(&self) -> Option<nix::Error> {
        match self {
            NetlinkError::Kernel { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    fn is(&self, e: nix::Error) -> bool {
        self.errno() == Some(e)
    }
}

/// A route in the main table, as skiff reads them back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub destination: Ipv4Cidr,
    pub gateway: Option<Ipv4Addr>,
    pub kind: RouteType,
    pub protocol: u8,
}

/// One rtnetlink socket in the calling thread's network namespace.
pub struct Netlink {
    socket: Socket,
    seq: u32,
}

impl Netlink {
    pub fn open() -> Result<Netlink, NetlinkError> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        Ok(Netlink { socket, seq: 0 })
    }

    /// Sends one request and collects the answers: until DONE for dumps, until the ACK for
    /// changes, the single answer otherwise.
    fn request(
        &mut self,
        what: impl Fn() -> String,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let mut req = NetlinkMessage::from(msg);
        req.header.flags = NLM_F_REQUEST | flags;
        req.header.sequence_number = self.seq;
        req.finalize();
        let mut buf = vec![0u8; req.buffer_len()];
        req.serialize(&mut buf);
        self.socket.send(&buf, 0)?;

        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        let ack = flags & NLM_F_ACK != 0;
        let mut out = Vec::new();
        let mut rx = vec![0u8; 64 * 1024];
        loop {
            let n = self.socket.recv(&mut &mut rx[..], 0)?;
            let mut offset = 0;
            while offset < n {
                let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&rx[offset..n])
                    .map_err(|e| NetlinkError::Decode(e.to_string()))?;
                let len = msg.header.length as usize;
                if msg.header.sequence_number != self.seq {
                    // A late answer to an earlier request: not ours to read.
                    offset += len.max(1);
                    continue;
                }
                match msg.payload {
                    NetlinkPayload::Done(_) => return Ok(out),
                    NetlinkPayload::Error(e) => match e.code {
                        None => return Ok(out),
                        Some(code) => {
                            return Err(NetlinkError::Kernel {
                                what: what(),
                                errno: nix::Error::from_raw(-code.get()),
                            })
                        }
                    },
                    NetlinkPayload::InnerMessage(m) => {
                        out.push(m);
                        if !dump && !ack {
                            return Ok(out);
                        }
                    }
                    _ => {}
                }
                if len == 0 {
                    break;
                }
                offset += len;
            }
        }
    }

    fn change(
        &mut self,
        what: impl Fn() -> String,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<(), NetlinkError> {
        self.request(what, msg, NLM_F_ACK | flags).map(|_| ())
    }

    // ---- links ---------------------------------------------------------------------------

    /// The index of the link called `name`, if there is one.
    pub fn link_index(&mut self, name: &str) -> Result<Option<u32>, NetlinkError> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.to_string()));
        match self.request(
            || format!("find link {name}"),
            RouteNetlinkMessage::GetLink(m),
            0,
        ) {
            Ok(answers) => Ok(answers.into_iter().find_map(|a| match a {
                RouteNetlinkMessage::NewLink(l) => Some(l.header.index),
                _ => None,
            })),
            Err(e) if e.is(nix::Error::ENODEV) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates a bridge called `name` unless a link of that name exists; answers its index.
    pub fn ensure_bridge(&mut self, name: &str) -> Result<u32, NetlinkError> {
        if let Some(i) = self.link_index(name)? {
            return Ok(i);
        }
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.to_string()));
        m.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                InfoKind::Bridge,
            )]));
        match self.change(
            || format!("create bridge {name}"),
            RouteNetlinkMessage::NewLink(m),
            NLM_F_CREATE | NLM_F_EXCL,
        ) {
            Ok(()) => {}
            // Another agent on this machine (tests) made it at the same moment.
            Err(e) if e.is(nix::Error::EEXIST) => {}
            Err(e) => return Err(e),
        }
        self.link_index(name)?.ok_or_else(|| NetlinkError::Kernel {
            what: format!("create bridge {name}"),
            errno: nix::Error::ENODEV,
        })
    }

    /// Creates a veth pair whose `host` end is in this namespace and whose other end, named
    /// `peer`, is created directly in the namespace `ns`. (Creating the peer here and moving it
    /// costs a network-wide RCU grace period under the rtnl lock, about 20 ms a pod that a
    /// burst of new pods pays one after another.)
    pub fn create_veth_into(
        &mut self,
        host: &str,
        peer: &str,
        ns: &std::fs::File,
    ) -> Result<(), NetlinkError> {
        let mut peer_msg = LinkMessage::default();
        peer_msg
            .attributes
            .push(LinkAttribute::IfName(peer.to_string()));
        peer_msg
            .attributes
            .push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(host.to_string()));
        m.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_msg))),
        ]));
        self.change(
            || format!("create veth pair {host}/{peer} into the pod's network namespace"),
            RouteNetlinkMessage::NewLink(m),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    /// Deletes a link by name; a missing one is fine.
    pub fn delete_link(&mut self, name: &str) -> Result<(), NetlinkError> {
        let Some(index) = self.link_index(name)? else {
            return Ok(());
        };
        let mut m = LinkMessage::default();
        m.header.index = index;
        match self.change(
            || format!("delete link {name}"),
            RouteNetlinkMessage::DelLink(m),
            0,
        ) {
            Err(e) if e.is(nix::Error::ENODEV) => Ok(()),
            other => other,
        }
    }

    /// Brings a link up, optionally enslaving it to `controller` (a bridge's index) first.
    pub fn set_up(&mut self, index: u32, controller: Option<u32>) -> Result<(), NetlinkError> {
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.header.flags = LinkFlags::Up;
        m.header.change_mask = LinkFlags::Up;
        if let Some(c) = controller {
            m.attributes.push(LinkAttribute::Controller(c));
        }
        self.change(
            || format!("bring link {index} up"),
            RouteNetlinkMessage::SetLink(m),
            0,
        )
    }

    /// Puts a bridge port in hairpin mode (`ip link set dev X type bridge_slave hairpin on`):
    /// the bridge may send a frame back out of the port it came in by. Through netlink, as
    /// `/sys/class/net` shows the links of the namespace sysfs was mounted in, not ours.
    pub fn set_hairpin(&mut self, index: u32) -> Result<(), NetlinkError> {
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::PortKind(InfoPortKind::Bridge),
            LinkInfo::PortData(InfoPortData::BridgePort(vec![InfoBridgePort::HairpinMode(
                true,
            )])),
        ]));
        self.change(
            || format!("set hairpin mode on link {index}"),
            RouteNetlinkMessage::NewLink(m),
            0,
        )
    }

    // ---- addresses -----------------------------------------------------------------------

    /// Adds `addr/prefix` to the link; an address already there is fine.
    pub fn add_address(
        &mut self,
        index: u32,
        addr: Ipv4Addr,
        prefix: u8,
    ) -> Result<(), NetlinkError> {
        let mut m = AddressMessage::default();
        m.header.family = AddressFamily::Inet;
        m.header.prefix_len = prefix;
        m.header.index = index;
        m.attributes.push(AddressAttribute::Local(addr.into()));
        m.attributes.push(AddressAttribute::Address(addr.into()));
        if let Ok(net) = Ipv4Cidr::new(addr, prefix) {
            if prefix < 31 {
                let last = net.nth(net.size() - 1).unwrap_or(addr);
                m.attributes.push(AddressAttribute::Broadcast(last));
            }
        }
        match self.change(
            || format!("add address {addr}/{prefix}"),
            RouteNetlinkMessage::NewAddress(m),
            NLM_F_CREATE | NLM_F_EXCL,
        ) {
            Err(e) if e.is(nix::Error::EEXIST) => Ok(()),
            other => other,
        }
    }

    // ---- routes --------------------------------------------------------------------------

    fn route_message(dest: Ipv4Cidr, kind: RouteType, protocol: u8) -> RouteMessage {
        let mut m = RouteMessage::default();
        m.header.address_family = AddressFamily::Inet;
        m.header.destination_prefix_length = dest.prefix();
        m.header.table = RouteHeader::RT_TABLE_MAIN;
        m.header.protocol = RouteProtocol::from(protocol);
        m.header.kind = kind;
        m.header.scope = RouteScope::Universe;
        if dest.prefix() > 0 {
            m.attributes
                .push(RouteAttribute::Destination(RouteAddress::Inet(
                    dest.network(),
                )));
        }
        m
    }

    /// Adds or replaces the route to `dest` through `gateway` (`ip route replace dest via gw`).
    pub fn replace_route_via(
        &mut self,
        dest: Ipv4Cidr,
        gateway: Ipv4Addr,
        protocol: u8,
    ) -> Result<(), NetlinkError> {
        let mut m = Self::route_message(dest, RouteType::Unicast, protocol);
        m.attributes
            .push(RouteAttribute::Gateway(RouteAddress::Inet(gateway)));
        self.change(
            || format!("route {dest} via {gateway}"),
            RouteNetlinkMessage::NewRoute(m),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// The default route through `gateway` (inside a pod).
    pub fn add_default_route(&mut self, gateway: Ipv4Addr) -> Result<(), NetlinkError> {
        let dest = Ipv4Cidr::new(Ipv4Addr::UNSPECIFIED, 0)
            .map_err(|e| NetlinkError::Decode(e.to_string()))?;
        self.replace_route_via(dest, gateway, RouteProtocol::Boot.into())
    }

    /// An `unreachable` route for `dest` with `metric`: packets to the range that no more
    /// specific route takes are refused here instead of following the default route.
    pub fn replace_unreachable(
        &mut self,
        dest: Ipv4Cidr,
        metric: u32,
        protocol: u8,
    ) -> Result<(), NetlinkError> {
        let mut m = Self::route_message(dest, RouteType::Unreachable, protocol);
        m.header.scope = RouteScope::NoWhere;
        m.attributes.push(RouteAttribute::Priority(metric));
        self.change(
            || format!("unreachable route {dest}"),
            RouteNetlinkMessage::NewRoute(m),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// Deletes a route previously read with [`Netlink::routes`]; a missing one is fine.
    pub fn delete_route(&mut self, r: &Route) -> Result<(), NetlinkError> {
        let mut m = Self::route_message(r.destination, r.kind, r.protocol);
        if let Some(gw) = r.gateway {
            m.attributes
                .push(RouteAttribute::Gateway(RouteAddress::Inet(gw)));
        }
        if r.kind == RouteType::Unreachable {
            m.header.scope = RouteScope::NoWhere;
        }
        match self.change(
            || format!("delete route {}", r.destination),
            RouteNetlinkMessage::DelRoute(m),
            0,
        ) {
            Err(e) if e.is(nix::Error::ESRCH) => Ok(()),
            other => other,
        }
    }

    /// The IPv4 routes of the main table.
    pub fn routes(&mut self) -> Result<Vec<Route>, NetlinkError> {
        let mut m = RouteMessage::default();
        m.header.address_family = AddressFamily::Inet;
        let answers = self.request(
            || "list routes".to_string(),
            RouteNetlinkMessage::GetRoute(m),
            NLM_F_DUMP,
        )?;
        let mut out = Vec::new();
        for a in answers {
            let RouteNetlinkMessage::NewRoute(r) = a else {
                continue;
            };
            if r.header.table != RouteHeader::RT_TABLE_MAIN {
                continue;
            }
            let mut dest = Ipv4Addr::UNSPECIFIED;
            let mut gateway = None;
            for attr in &r.attributes {
                match attr {
                    RouteAttribute::Destination(RouteAddress::Inet(a)) => dest = *a,
                    RouteAttribute::Gateway(RouteAddress::Inet(a)) => gateway = Some(*a),
                    _ => {}
                }
            }
            let Ok(destination) = Ipv4Cidr::new(dest, r.header.destination_prefix_length) else {
                continue;
            };
            out.push(Route {
                destination,
                gateway,
                kind: r.header.kind,
                protocol: r.header.protocol.into(),
            });
        }
        Ok(out)
    }
}
