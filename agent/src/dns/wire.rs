//! The DNS wire format at the edge: reading the question of a query (by hand, so that queries
//! of any record type or class can be routed), and writing answers with `simple-dns`.

use std::borrow::Cow;

use simple_dns::rdata::{RData, A, AAAA, CNAME, OPT, PTR, SOA, SRV};
use simple_dns::{
    Name, Packet, PacketFlag, Question, ResourceRecord, CLASS, OPCODE, QCLASS, QTYPE, RCODE, TYPE,
};

use super::zone::{Record, RecordData};

/// The largest UDP payload this server sends when the client allows more than 512 bytes.
pub const MAX_UDP_PAYLOAD: u16 = 1232;

/// Why a message could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("the message is shorter than its header says")]
    Truncated,
    #[error("the message is a response, not a query")]
    NotAQuery,
    #[error("the message has {0} questions (one is supported)")]
    QuestionCount(u16),
    #[error("the question's name is malformed")]
    BadName,
    #[error("cannot write the answer: {0}")]
    Write(String),
}

/// The parts of a query this server looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    pub id: u16,
    pub opcode: u8,
    pub recursion_desired: bool,
    /// The question's labels as asked (case kept).
    pub labels: Vec<Vec<u8>>,
    pub qtype: u16,
    pub qclass: u16,
    /// The UDP payload size of the client's EDNS OPT record, if it sent one.
    pub edns_size: Option<u16>,
}

struct Reader<'a> {
    msg: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn u8(&mut self) -> Result<u8, WireError> {
        let b = *self.msg.get(self.pos).ok_or(WireError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from(self.u8()?) << 8 | u16::from(self.u8()?))
    }

    fn skip(&mut self, n: usize) -> Result<(), WireError> {
        if self.pos + n > self.msg.len() {
            return Err(WireError::Truncated);
        }
        self.pos += n;
        Ok(())
    }

    /// Reads a name's labels. With `allow_pointer`, a compression pointer ends it (its target
    /// is not followed, which is enough to skip a record); without, it is an error.
    fn name(&mut self, allow_pointer: bool) -> Result<Vec<Vec<u8>>, WireError> {
        let mut labels = Vec::new();
        let mut total = 0usize;
        loop {
            let len = self.u8()?;
            match len {
                0 => return Ok(labels),
                l if l & 0xC0 == 0xC0 => {
                    if !allow_pointer {
                        return Err(WireError::BadName);
                    }
                    self.u8()?;
                    return Ok(labels);
                }
                l if l > 63 => return Err(WireError::BadName),
                l => {
                    let l = usize::from(l);
                    let start = self.pos;
                    self.skip(l)?;
                    total += l + 1;
                    if total > 255 {
                        return Err(WireError::BadName);
                    }
                    labels.push(self.msg[start..start + l].to_vec());
                }
            }
        }
    }
}

impl Query {
    /// Reads the header, the one question and the EDNS record of a query.
    pub fn parse(msg: &[u8]) -> Result<Query, WireError> {
        let mut r = Reader { msg, pos: 0 };
        let id = r.u16()?;
        let flags = r.u16()?;
        if flags & 0x8000 != 0 {
            return Err(WireError::NotAQuery);
        }
        let qdcount = r.u16()?;
        let ancount = r.u16()?;
        let nscount = r.u16()?;
        let arcount = r.u16()?;
        if qdcount != 1 {
            return Err(WireError::QuestionCount(qdcount));
        }
        let mut query = Query {
            id,
            opcode: ((flags >> 11) & 0xF) as u8,
            recursion_desired: flags & 0x0100 != 0,
            labels: Vec::new(),
            qtype: 0,
            qclass: 0,
            edns_size: None,
        };
        // A pointer in the question is legal but unheard of in queries: refused as malformed.
        query.labels = r.name(false)?;
        query.qtype = r.u16()?;
        query.qclass = r.u16()?;
        // The OPT record lives in the additional section; anything odd there only means no EDNS.
        let skip_record = |r: &mut Reader<'_>| -> Result<Option<u16>, WireError> {
            let name = r.name(true)?;
            let ty = r.u16()?;
            let class = r.u16()?;
            r.skip(4)?;
            let len = r.u16()?;
            r.skip(usize::from(len))?;
            Ok((ty == 41 && name.is_empty()).then_some(class))
        };
        let mut edns = None;
        let mut walk = || -> Result<(), WireError> {
            for _ in 0..u32::from(ancount) + u32::from(nscount) {
                skip_record(&mut r)?;
            }
            for _ in 0..arcount {
                if let Some(size) = skip_record(&mut r)? {
                    edns = Some(size);
                }
            }
            Ok(())
        };
        let _ = walk();
        query.edns_size = edns;
        Ok(query)
    }

    /// The question's name, lower case, dotted, without the trailing dot (`""` for the root).
    pub fn name(&self) -> String {
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|l| String::from_utf8_lossy(l).to_ascii_lowercase())
            .collect();
        labels.join(".")
    }

    /// The largest UDP answer the client takes.
    pub fn max_udp_size(&self) -> usize {
        usize::from(
            self.edns_size
                .map_or(512, |s| s.clamp(512, MAX_UDP_PAYLOAD)),
        )
    }
}

/// The id of a message (0 if it is too short to have one).
pub fn message_id(msg: &[u8]) -> u16 {
    match msg {
        [a, b, ..] => u16::from_be_bytes([*a, *b]),
        _ => 0,
    }
}

/// What to answer: an rcode and the records of each section.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    pub rcode: u16,
    pub authoritative: bool,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
    pub additional: Vec<Record>,
}

pub const NOERROR: u16 = 0;
pub const FORMERR: u16 = 1;
pub const SERVFAIL: u16 = 2;
pub const NXDOMAIN: u16 = 3;
pub const NOTIMP: u16 = 4;
pub const REFUSED: u16 = 5;

fn dns_name(s: &str) -> Name<'_> {
    Name::new_unchecked(s)
}

fn resource(r: &Record) -> ResourceRecord<'_> {
    let data = match &r.data {
        RecordData::A(ip) => RData::A(A::from(*ip)),
        RecordData::Aaaa(ip) => RData::AAAA(AAAA::from(*ip)),
        RecordData::Cname(n) => RData::CNAME(CNAME(dns_name(n))),
        RecordData::Ptr(n) => RData::PTR(PTR(dns_name(n))),
        RecordData::Srv {
            priority,
            weight,
            port,
            target,
        } => RData::SRV(SRV {
            priority: *priority,
            weight: *weight,
            port: *port,
            target: dns_name(target),
        }),
        RecordData::Soa {
            mname,
            rname,
            serial,
            refresh,
            retry,
            expire,
            minimum,
        } => RData::SOA(SOA {
            mname: dns_name(mname),
            rname: dns_name(rname),
            serial: *serial,
            refresh: *refresh,
            retry: *retry,
            expire: *expire,
            minimum: *minimum,
        }),
    };
    ResourceRecord::new(dns_name(&r.name), CLASS::IN, r.ttl, data)
}

/// Writes the answer to `query`; a UDP answer larger than `max_size` is sent empty with the
/// TC flag, so that the client asks again over TCP.
pub fn write_reply(query: &Query, reply: &Reply, max_size: Option<usize>) -> Vec<u8> {
    let full = build(query, reply, false);
    match (full, max_size) {
        (Ok(bytes), Some(max)) if bytes.len() > max => {
            let empty = Reply {
                rcode: reply.rcode,
                authoritative: reply.authoritative,
                ..Default::default()
            };
            build(query, &empty, true).unwrap_or_else(|_| bare(query.id, SERVFAIL))
        }
        (Ok(bytes), _) => bytes,
        (Err(e), _) => {
            tracing::warn!("cannot write a DNS answer: {e}");
            bare(query.id, SERVFAIL)
        }
    }
}

fn build(query: &Query, reply: &Reply, truncated: bool) -> Result<Vec<u8>, WireError> {
    let mut p = Packet::new_reply(query.id);
    *p.opcode_mut() = OPCODE::from(u16::from(query.opcode));
    *p.rcode_mut() = RCODE::from(reply.rcode);
    let mut flags = PacketFlag::RECURSION_AVAILABLE;
    if query.recursion_desired {
        flags |= PacketFlag::RECURSION_DESIRED;
    }
    if reply.authoritative {
        flags |= PacketFlag::AUTHORITATIVE_ANSWER;
    }
    if truncated {
        flags |= PacketFlag::TRUNCATION;
    }
    p.set_flags(flags);
    let labels: Vec<simple_dns::Label<'_>> = query
        .labels
        .iter()
        .map(|l| simple_dns::Label::new_unchecked(Cow::Borrowed(l.as_slice())))
        .collect();
    let qtype = QTYPE::try_from(query.qtype).unwrap_or(QTYPE::TYPE(TYPE::Unknown(query.qtype)));
    let qclass = QCLASS::try_from(query.qclass).unwrap_or(QCLASS::CLASS(CLASS::IN));
    p.questions.push(Question::new(
        Name::new_with_labels(&labels),
        qtype,
        qclass,
        false,
    ));
    p.answers = reply.answers.iter().map(resource).collect();
    p.name_servers = reply.authority.iter().map(resource).collect();
    p.additional_records = reply.additional.iter().map(resource).collect();
    if query.edns_size.is_some() {
        *p.opt_mut() = Some(OPT {
            opt_codes: Vec::new(),
            udp_packet_size: MAX_UDP_PAYLOAD,
            version: 0,
        });
    }
    p.build_bytes_vec_compressed()
        .map_err(|e| WireError::Write(e.to_string()))
}

/// A header-only answer (for messages whose question cannot be read).
pub fn bare(id: u16, rcode: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    out.extend_from_slice(&id.to_be_bytes());
    // QR and RA set, the rcode in the low four bits.
    out.extend_from_slice(&(0x8080u16 | (rcode & 0xF)).to_be_bytes());
    out.extend_from_slice(&[0; 8]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn query_bytes(name: &str, qtype: TYPE, edns: bool) -> Vec<u8> {
        let mut p = Packet::new_query(0x1234);
        p.set_flags(PacketFlag::RECURSION_DESIRED);
        p.questions.push(Question::new(
            Name::new_unchecked(name),
            qtype.into(),
            CLASS::IN.into(),
            false,
        ));
        if edns {
            *p.opt_mut() = Some(OPT {
                opt_codes: Vec::new(),
                udp_packet_size: 4096,
                version: 0,
            });
        }
        p.build_bytes_vec().unwrap()
    }

    #[test]
    fn reads_the_question_and_edns_size() {
        let q = Query::parse(&query_bytes("Web.Default.svc.cluster.local", TYPE::A, true)).unwrap();
        assert_eq!(q.id, 0x1234);
        assert_eq!(q.name(), "web.default.svc.cluster.local");
        assert_eq!(q.labels[0], b"Web");
        assert_eq!((q.qtype, q.qclass), (1, 1));
        assert!(q.recursion_desired);
        assert_eq!(q.edns_size, Some(4096));
        assert_eq!(q.max_udp_size(), usize::from(MAX_UDP_PAYLOAD));
        let q = Query::parse(&query_bytes("example.com", TYPE::AAAA, false)).unwrap();
        assert_eq!((q.qtype, q.edns_size, q.max_udp_size()), (28, None, 512));
    }

    #[test]
    fn refuses_what_is_not_one_question() {
        assert_eq!(Query::parse(&[1, 2, 3]), Err(WireError::Truncated));
        let mut answer = query_bytes("a.b", TYPE::A, false);
        answer[2] |= 0x80;
        assert_eq!(Query::parse(&answer), Err(WireError::NotAQuery));
        let mut two = query_bytes("a.b", TYPE::A, false);
        two[5] = 2;
        assert_eq!(Query::parse(&two), Err(WireError::QuestionCount(2)));
        let mut cut = query_bytes("a.b", TYPE::A, false);
        cut.truncate(cut.len() - 3);
        assert_eq!(Query::parse(&cut), Err(WireError::Truncated));
    }

    #[test]
    fn unknown_record_types_are_read_and_echoed() {
        let mut bytes = query_bytes("x.example", TYPE::A, false);
        let n = bytes.len();
        bytes[n - 4..n - 2].copy_from_slice(&65400u16.to_be_bytes());
        let q = Query::parse(&bytes).unwrap();
        assert_eq!(q.qtype, 65400);
        let out = write_reply(
            &q,
            &Reply {
                rcode: NXDOMAIN,
                ..Default::default()
            },
            Some(512),
        );
        assert_eq!(&out[out.len() - 4..out.len() - 2], &65400u16.to_be_bytes());
        assert_eq!(out[3] & 0xF, 3);
    }

    #[test]
    fn answers_round_trip_and_large_udp_answers_are_truncated() {
        let q = Query::parse(&query_bytes("big.ns.svc.cluster.local", TYPE::A, false)).unwrap();
        let record = |i: u8| Record {
            name: "big.ns.svc.cluster.local".into(),
            ttl: 5,
            data: RecordData::A(Ipv4Addr::new(10, 42, 0, i)),
        };
        let reply = Reply {
            rcode: NOERROR,
            authoritative: true,
            answers: (1..=3).map(record).collect(),
            ..Default::default()
        };
        let bytes = write_reply(&q, &reply, Some(512));
        let p = Packet::parse(&bytes).unwrap();
        assert_eq!(p.id(), 0x1234);
        assert!(p.has_flags(PacketFlag::RESPONSE | PacketFlag::AUTHORITATIVE_ANSWER));
        assert!(p.has_flags(PacketFlag::RECURSION_DESIRED));
        assert_eq!(p.answers.len(), 3);
        assert_eq!(p.questions[0].qname.to_string(), "big.ns.svc.cluster.local");

        let many = Reply {
            answers: (1..=60).map(record).collect(),
            ..reply
        };
        let bytes = write_reply(&q, &many, Some(512));
        let p = Packet::parse(&bytes).unwrap();
        assert!(p.has_flags(PacketFlag::TRUNCATION));
        assert!(p.answers.is_empty());
        // Over TCP, no limit.
        let bytes = write_reply(&q, &many, None);
        assert_eq!(Packet::parse(&bytes).unwrap().answers.len(), 60);
    }

    #[test]
    fn bare_answers_carry_id_and_rcode() {
        let b = bare(0xBEEF, FORMERR);
        assert_eq!(message_id(&b), 0xBEEF);
        let p = Packet::parse(&b).unwrap();
        assert_eq!(p.rcode(), RCODE::FormatError);
    }
}
