//! Kubernetes' own CEL libraries, as kube-apiserver 1.32 offers them to the rules of a custom
//! resource (`k8s.io/apiserver/pkg/cel/library`), registered on the `cel` crate's
//! environment next to its standard library and extensions:
//!
//! * URLs: `isURL`, `url`, and a URL's `getScheme`, `getHost`, `getHostname`, `getPort`,
//!   `getEscapedPath`, `getQuery`. A URL is an absolute URI or an absolute path, parsed as
//!   Go's `url.ParseRequestURI` parses it (what kube calls), so the same strings are accepted
//!   and the getters answer the same (`getPort` keeps a default port, no normalisation);
//! * IPs and CIDRs: `isIP`, `ip`, `ip.isCanonical`, `family`, `isUnspecified`, `isLoopback`,
//!   `isLinkLocalMulticast`, `isLinkLocalUnicast`, `isGlobalUnicast`, `isCIDR`, `cidr`,
//!   `containsIP`, `containsCIDR`, `ip()`, `masked`, `prefixLength`, `string(ip|cidr)`;
//!   zones and IPv4-mapped IPv6 addresses refused as kube refuses them;
//! * quantities: `isQuantity`, `quantity`, `sign`, `isInteger`, `asInteger`,
//!   `asApproximateFloat`, `add`, `sub`, `compareTo`, `isGreaterThan`, `isLessThan`, exact
//!   (a fraction of 128-bit integers, from `api::quantity`);
//! * formats: `format.named(name)` and `format.<name>()`, with `validate(s)` giving
//!   `optional.none()` or the list of kube's messages;
//! * regex: `find`, `findAll`; lists: `isSorted`, `sum`, `min`, `max`, `indexOf`,
//!   `lastIndexOf` (the crate's lists extension has none of these).
//!
//! Errors carry kube's messages: [`message`] takes them out of the crate's error type.

use std::any::Any;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::net::IpAddr;

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelOptional, CelString, Type, DYN_TYPE,
    INT_TYPE, LIST_TYPE, STRING_TYPE,
};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

/// The function name of the errors whose message is kube's own, shown as it is.
const KUBE: &str = "@k8s";

fn err(message: impl Into<String>) -> ExecutionError {
    ExecutionError::function_error(KUBE, message.into())
}

/// An evaluation error's text: kube's own message for the errors of these libraries.
pub fn message(e: &ExecutionError) -> String {
    match e {
        ExecutionError::FunctionError { function, message } if function == KUBE => message.clone(),
        other => other.to_string(),
    }
}

type Res<'b, 'v> = Result<CowVal<'b, 'v>, ExecutionError>;

fn arg<'a, 'b, 'v, T: cel::common::value::FromVal<'a, 'v> + Val>(
    args: &'a [CowVal<'b, 'v>],
    i: usize,
) -> Result<&'a T, ExecutionError> {
    let v = args
        .get(i)
        .ok_or_else(|| ExecutionError::invalid_argument_count(i + 1, args.len()))?;
    v.downcast_ref::<T>()
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: v.get_type().name().to_owned(),
            want: T::cel_type().name().to_owned(),
        })
}

fn string_arg<'a>(args: &'a [CowVal<'_, '_>], i: usize) -> Result<&'a str, ExecutionError> {
    let v = args
        .get(i)
        .ok_or_else(|| ExecutionError::invalid_argument_count(i + 1, args.len()))?;
    v.downcast_ref::<CelString>()
        .map(|s| s.inner())
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: v.get_type().name().to_owned(),
            want: "string".to_owned(),
        })
}

fn int_arg(args: &[CowVal<'_, '_>], i: usize) -> Result<i64, ExecutionError> {
    arg::<CelInt>(args, i).map(|n| *n.inner())
}

fn bool_val<'b, 'v>(b: bool) -> Res<'b, 'v> {
    Ok(CowVal::owned(CelBool::from(b)))
}

fn string_val<'b, 'v>(s: impl Into<String>) -> Res<'b, 'v> {
    Ok(CowVal::owned(CelString::from(s.into())))
}

fn int_val<'b, 'v>(n: i64) -> Res<'b, 'v> {
    Ok(CowVal::owned(CelInt::from(n)))
}

/// Declares an opaque value type: its CEL type, equality and cloning.
macro_rules! opaque {
    ($t:ty, $ty:ident, $name:literal) => {
        static $ty: Type = Type::new_unspecified_type($name);
        impl Val for $t {
            fn get_type(&self) -> &Type {
                &$ty
            }
            fn cel_type() -> &'static Type {
                &$ty
            }
            fn equals(&self, other: &dyn Val) -> bool {
                other.downcast_ref::<$t>().is_some_and(|o| self.same(o))
            }
            fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
                Box::new(self.clone())
            }
            fn as_any(&self) -> Option<&dyn Any> {
                Some(self)
            }
        }
        impl StaticVal for $t {}
    };
}

/// Registers every library on `env`.
pub fn extension(env: &mut Env) -> Result<(), DeclarationError> {
    urls(env)?;
    ips(env)?;
    cidrs(env)?;
    quantities(env)?;
    formats(env)?;
    regex(env)?;
    lists(env)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// URLs

/// A URL as Go's `net/url` parses it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Url {
    scheme: String,
    opaque: String,
    user: Option<String>,
    host: String,
    path: String,
    raw_path: String,
    raw_query: String,
    force_query: bool,
    fragment: Option<String>,
}

opaque!(Url, URL_TYPE, "kubernetes.URL");

impl Url {
    fn same(&self, other: &Url) -> bool {
        self.to_string() == other.to_string()
    }

    /// Go's `url.ParseRequestURI` then `url.Parse` (for the fragment), as kube's `url()`.
    pub fn parse(s: &str) -> Result<Url, String> {
        parse_url(s, true)?;
        let (rest, fragment) = match s.split_once('#') {
            Some((r, f)) => (r, Some(f)),
            None => (s, None),
        };
        let mut u = parse_url(rest, false)?;
        if let Some(f) = fragment {
            u.fragment = Some(unescape(f, Mode::Fragment).map_err(|e| wrap(s, &e))?);
        }
        Ok(u)
    }

    fn hostname(&self) -> &str {
        let host = split_host_port(&self.host).0;
        host.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
    }

    fn port(&self) -> &str {
        split_host_port(&self.host).1
    }

    fn escaped_path(&self) -> String {
        if !self.raw_path.is_empty()
            && valid_encoded(&self.raw_path)
            && unescape(&self.raw_path, Mode::Path).ok().as_deref() == Some(&self.path)
        {
            return self.raw_path.clone();
        }
        if self.path == "*" {
            return "*".into();
        }
        escape(&self.path, Mode::Path)
    }

    fn query(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for pair in self.raw_query.split('&') {
            if pair.is_empty() || pair.contains(';') {
                continue;
            }
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let (Ok(k), Ok(v)) = (unescape(k, Mode::Query), unescape(v, Mode::Query)) else {
                continue;
            };
            match out.iter_mut().find(|(key, _)| *key == k) {
                Some((_, vs)) => vs.push(v),
                None => out.push((k, vec![v])),
            }
        }
        out
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.scheme.is_empty() {
            write!(f, "{}:", self.scheme)?;
        }
        if !self.opaque.is_empty() {
            f.write_str(&self.opaque)?;
        } else {
            if !self.host.is_empty() || self.user.is_some() {
                f.write_str("//")?;
                if let Some(u) = &self.user {
                    write!(f, "{u}@")?;
                }
                f.write_str(&self.host)?;
            }
            f.write_str(&self.escaped_path())?;
        }
        if self.force_query || !self.raw_query.is_empty() {
            write!(f, "?{}", self.raw_query)?;
        }
        if let Some(frag) = &self.fragment {
            write!(f, "#{}", escape(frag, Mode::Fragment))?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Path,
    Host,
    Query,
    Fragment,
    UserPassword,
}

fn wrap(url: &str, e: &str) -> String {
    format!("parse {url:?}: {e}")
}

fn parse_url(raw: &str, via_request: bool) -> Result<Url, String> {
    let fail = |e: &str| Err(wrap(raw, e));
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return fail("net/url: invalid control character in URL");
    }
    if raw.is_empty() && via_request {
        return fail("empty url");
    }
    let mut u = Url::default();
    if raw == "*" {
        u.path = "*".into();
        return Ok(u);
    }
    let (scheme, mut rest) = match scheme_of(raw) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    u.scheme = scheme.to_ascii_lowercase();
    let owned;
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        u.force_query = true;
        rest = &rest[..rest.len() - 1];
    } else if let Some((r, q)) = rest.split_once('?') {
        u.raw_query = q.to_string();
        owned = r.to_string();
        rest = &owned;
    }
    if !rest.starts_with('/') {
        if !u.scheme.is_empty() {
            u.opaque = rest.to_string();
            return Ok(u);
        }
        if via_request {
            return fail("invalid URI for request");
        }
        if rest.split('/').next().unwrap_or("").contains(':') {
            return fail("first path segment in URL cannot contain colon");
        }
    }
    let mut path = rest;
    if (!u.scheme.is_empty() || !via_request && !rest.starts_with("///")) && rest.starts_with("//")
    {
        let authority_and_path = &rest[2..];
        let (authority, p) = match authority_and_path.find('/') {
            Some(i) => authority_and_path.split_at(i),
            None => (authority_and_path, ""),
        };
        path = p;
        let (user, host) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        u.host = parse_host(host).map_err(|e| wrap(raw, &e))?;
        if let Some(user) = user {
            let ok = user.chars().all(|c| {
                c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c) || !c.is_ascii()
            });
            if !ok {
                return fail("net/url: invalid userinfo");
            }
            for part in user.splitn(2, ':') {
                unescape(part, Mode::UserPassword).map_err(|e| wrap(raw, &e))?;
            }
            u.user = Some(user.to_string());
        }
    }
    u.path = unescape(path, Mode::Path).map_err(|e| wrap(raw, &e))?;
    if escape(&u.path, Mode::Path) != path {
        u.raw_path = path.to_string();
    }
    Ok(u)
}

fn scheme_of(raw: &str) -> Result<(&str, &str), &'static str> {
    for (i, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err("missing protocol scheme"),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

fn valid_optional_port(port: &str) -> bool {
    port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
}

fn parse_host(host: &str) -> Result<String, String> {
    if host.starts_with('[') {
        let Some(i) = host.rfind(']') else {
            return Err("missing ']' in host".into());
        };
        let port = &host[i + 1..];
        if !valid_optional_port(port) {
            return Err(format!("invalid port {port:?} after host"));
        }
    } else if let Some(i) = host.rfind(':') {
        let port = &host[i..];
        if !valid_optional_port(port) {
            return Err(format!("invalid port {port:?} after host"));
        }
    }
    unescape(host, Mode::Host)
}

fn split_host_port(host: &str) -> (&str, &str) {
    match host.rfind(':') {
        Some(i) if valid_optional_port(&host[i..]) => (&host[..i], &host[i + 1..]),
        _ => (host, ""),
    }
}

fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'~') {
        return false;
    }
    if mode == Mode::Host
        && matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'['
                | b']'
                | b'<'
                | b'>'
                | b'"'
        )
    {
        return false;
    }
    match c {
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => match mode {
            Mode::Path => c == b'?',
            Mode::UserPassword => matches!(c, b'@' | b'/' | b'?' | b':'),
            Mode::Query => true,
            Mode::Fragment => false,
            Mode::Host => true,
        },
        b'!' | b'(' | b')' | b'*' if mode == Mode::Fragment => false,
        _ => true,
    }
}

fn unescape(s: &str, mode: Mode) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = |c: u8| (c as char).to_digit(16);
                let (Some(h), Some(l)) = (
                    b.get(i + 1).and_then(|c| hex(*c)),
                    b.get(i + 2).and_then(|c| hex(*c)),
                ) else {
                    let bad = &s[i..s.len().min(i + 3)];
                    return Err(format!("invalid URL escape {bad:?}"));
                };
                if mode == Mode::Host && h < 8 && &s[i..i + 3] != "%25" {
                    return Err(format!("invalid URL escape {:?}", &s[i..i + 3]));
                }
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            b'+' if mode == Mode::Query => {
                out.push(b' ');
                i += 1;
            }
            c => {
                if mode == Mode::Host && c < 0x80 && should_escape(c, mode) {
                    return Err(format!(
                        "invalid character {:?} in host name",
                        (c as char).to_string()
                    ));
                }
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

fn escape(s: &str, mode: Mode) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s.as_bytes() {
        if should_escape(c, mode) {
            out.push_str(&format!("%{c:02X}"));
        } else {
            out.push(c as char);
        }
    }
    out
}

fn valid_encoded(s: &str) -> bool {
    s.bytes().all(|c| {
        matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'['
                | b']'
                | b'%'
        ) || !should_escape(c, Mode::Path)
    })
}

fn url_fn<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let s = string_arg(&args, 0)?;
    match Url::parse(s) {
        Ok(u) => Ok(CowVal::owned(u)),
        Err(e) => Err(err(format!(
            "URL parse error during conversion from string: {e}"
        ))),
    }
}

fn is_url<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    bool_val(parse_url(string_arg(&args, 0)?, true).is_ok())
}

fn url_getter<'b, 'v>(args: &[CowVal<'b, 'v>], f: fn(&Url) -> String) -> Res<'b, 'v> {
    string_val(f(arg::<Url>(args, 0)?))
}

fn urls(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload("url", "string_to_url", vec![STRING_TYPE], url_fn)?;
    env.add_overload("isURL", "is_url_string", vec![STRING_TYPE], is_url)?;
    let t = || URL_TYPE.to_owned();
    env.add_member_overload("getScheme", "url_get_scheme", t(), vec![], |a| {
        url_getter(&a, |u| u.scheme.clone())
    })?;
    env.add_member_overload("getHost", "url_get_host", t(), vec![], |a| {
        url_getter(&a, |u| u.host.clone())
    })?;
    env.add_member_overload("getHostname", "url_get_hostname", t(), vec![], |a| {
        url_getter(&a, |u| u.hostname().to_string())
    })?;
    env.add_member_overload("getPort", "url_get_port", t(), vec![], |a| {
        url_getter(&a, |u| u.port().to_string())
    })?;
    env.add_member_overload("getEscapedPath", "url_get_escaped_path", t(), vec![], |a| {
        url_getter(&a, Url::escaped_path)
    })?;
    env.add_member_overload("getQuery", "url_get_query", t(), vec![], |a| {
        let u = arg::<Url>(&a, 0)?;
        let mut map: HashMap<CelMapKey<'_>, Box<dyn Val>> = HashMap::new();
        for (k, vs) in u.query() {
            let list: Vec<Box<dyn Val>> = vs
                .into_iter()
                .map(|v| Box::new(CelString::from(v)) as Box<dyn Val>)
                .collect();
            map.insert(CelMapKey::from(k), Box::new(CelList::from(list)));
        }
        Ok(CowVal::owned(CelMap::from(map)))
    })?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// IPs and CIDRs

/// An IP address (`net.IP`).
#[derive(Clone, Debug, PartialEq)]
pub struct Ip(pub IpAddr);

opaque!(Ip, IP_TYPE, "net.IP");

impl Ip {
    fn same(&self, other: &Ip) -> bool {
        self == other
    }
}

/// A network, an address and a prefix length (`net.IPNet`).
#[derive(Clone, Debug, PartialEq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub bits: u8,
}

opaque!(Cidr, CIDR_TYPE, "net.IPNet");

impl Cidr {
    fn same(&self, other: &Cidr) -> bool {
        self == other
    }

    fn masked(&self) -> Cidr {
        let addr = match self.addr {
            IpAddr::V4(a) => {
                let m = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
                IpAddr::V4((u32::from(a) & m).into())
            }
            IpAddr::V6(a) => {
                let m = u128::MAX
                    .checked_shl(128 - u32::from(self.bits))
                    .unwrap_or(0);
                IpAddr::V6((u128::from(a) & m).into())
            }
        };
        Cidr {
            addr,
            bits: self.bits,
        }
    }

    fn contains(&self, ip: &IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4()
            && Cidr {
                addr: *ip,
                bits: self.bits,
            }
            .masked()
                == self.masked()
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

/// Go's `netip.ParseAddr`, with its zone handling: the address and its zone.
fn parse_addr(s: &str) -> Result<(IpAddr, bool), String> {
    let fail = || format!("ParseAddr({s:?}): unable to parse IP");
    if s.contains(':') {
        let (a, zone) = match s.split_once('%') {
            Some((_, "")) => {
                return Err(format!("ParseAddr({s:?}): zone must be a non-empty string"));
            }
            Some((a, _)) => (a, true),
            None => (s, false),
        };
        let addr: std::net::Ipv6Addr = a.parse().map_err(|_| fail())?;
        Ok((IpAddr::V6(addr), zone))
    } else if s.contains('.') {
        let addr: std::net::Ipv4Addr = s.parse().map_err(|_| fail())?;
        Ok((IpAddr::V4(addr), false))
    } else {
        Err(fail())
    }
}

fn is_4in6(a: &IpAddr) -> bool {
    matches!(a, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
}

/// kube's `parseIPAddr`: no zones, no IPv4-mapped IPv6 addresses.
fn parse_ip(s: &str) -> Result<IpAddr, String> {
    let (addr, zone) = parse_addr(s)
        .map_err(|e| format!("IP Address {s:?} parse error during conversion from string: {e}"))?;
    if zone {
        return Err(format!("IP address {s:?} with zone value is not allowed"));
    }
    if is_4in6(&addr) {
        return Err(format!("IPv4-mapped IPv6 address {s:?} is not allowed"));
    }
    Ok(addr)
}

/// kube's `parseCIDR` (`netip.ParsePrefix`, no IPv4-mapped IPv6 addresses).
fn parse_cidr(s: &str) -> Result<Cidr, String> {
    let wrap =
        |e: String| format!("network address parse error during conversion from string: {e}");
    let prefix = |e: &str| wrap(format!("netip.ParsePrefix({s:?}): {e}"));
    let Some((a, bits)) = s.rsplit_once('/') else {
        return Err(prefix("no '/'"));
    };
    let (addr, zone) = parse_addr(a).map_err(|e| prefix(&e))?;
    if zone {
        return Err(prefix("IPv6 zones cannot be present in a prefix"));
    }
    let ok_digits = !bits.is_empty()
        && bits.bytes().all(|b| b.is_ascii_digit())
        && !(bits.len() > 1 && bits.starts_with('0'));
    let n: u32 = match bits.parse() {
        Ok(n) if ok_digits => n,
        _ => return Err(prefix(&format!("bad bits after slash: {bits:?}"))),
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if n > max {
        return Err(prefix("prefix length out of range"));
    }
    if is_4in6(&addr) {
        return Err(wrap(format!(
            "IPv4-mapped IPv6 address {s:?} is not allowed"
        )));
    }
    Ok(Cidr {
        addr,
        bits: n as u8,
    })
}

fn ip_pred<'b, 'v>(args: &[CowVal<'b, 'v>], f: fn(&IpAddr) -> bool) -> Res<'b, 'v> {
    bool_val(f(&arg::<Ip>(args, 0)?.0))
}

fn is_link_local_multicast(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            o[0] == 224 && o[1] == 0 && o[2] == 0
        }
        IpAddr::V6(v6) => {
            let o = v6.octets();
            o[0] == 0xff && o[1] & 0x0f == 0x02
        }
    }
}

fn is_link_local_unicast(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn is_global_unicast(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => {
            !v4.is_unspecified()
                && !v4.is_broadcast()
                && !v4.is_loopback()
                && !v4.is_multicast()
                && !v4.is_link_local()
        }
        IpAddr::V6(v6) => {
            !v6.is_unspecified()
                && !v6.is_loopback()
                && !v6.is_multicast()
                && !is_link_local_unicast(a)
        }
    }
}

fn ips(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload("ip", "string_to_ip", vec![STRING_TYPE], |a| {
        let s = string_arg(&a, 0)?;
        parse_ip(s).map(|ip| CowVal::owned(Ip(ip))).map_err(err)
    })?;
    env.add_overload("isIP", "is_ip", vec![STRING_TYPE], |a| {
        bool_val(parse_ip(string_arg(&a, 0)?).is_ok())
    })?;
    env.add_overload(
        "ip.isCanonical",
        "ip_is_canonical",
        vec![STRING_TYPE],
        |a| {
            let s = string_arg(&a, 0)?;
            let ip = parse_ip(s).map_err(err)?;
            bool_val(ip.to_string() == s)
        },
    )?;
    env.add_overload("string", "ip_to_string", vec![IP_TYPE.to_owned()], |a| {
        string_val(arg::<Ip>(&a, 0)?.0.to_string())
    })?;
    let t = || IP_TYPE.to_owned();
    env.add_member_overload("family", "ip_family", t(), vec![], |a| {
        int_val(if arg::<Ip>(&a, 0)?.0.is_ipv4() { 4 } else { 6 })
    })?;
    env.add_member_overload("isUnspecified", "ip_is_unspecified", t(), vec![], |a| {
        ip_pred(&a, IpAddr::is_unspecified)
    })?;
    env.add_member_overload("isLoopback", "ip_is_loopback", t(), vec![], |a| {
        ip_pred(&a, IpAddr::is_loopback)
    })?;
    env.add_member_overload(
        "isLinkLocalMulticast",
        "ip_is_link_local_multicast",
        t(),
        vec![],
        |a| ip_pred(&a, is_link_local_multicast),
    )?;
    env.add_member_overload(
        "isLinkLocalUnicast",
        "ip_is_link_local_unicast",
        t(),
        vec![],
        |a| ip_pred(&a, is_link_local_unicast),
    )?;
    env.add_member_overload(
        "isGlobalUnicast",
        "ip_is_global_unicast",
        t(),
        vec![],
        |a| ip_pred(&a, is_global_unicast),
    )?;
    Ok(())
}

fn cidrs(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload("cidr", "string_to_cidr", vec![STRING_TYPE], |a| {
        parse_cidr(string_arg(&a, 0)?)
            .map(CowVal::owned)
            .map_err(|e| {
                err(format!(
                    "network address parse error during conversion from string: {e}"
                ))
            })
    })?;
    env.add_overload("isCIDR", "is_cidr", vec![STRING_TYPE], |a| {
        bool_val(parse_cidr(string_arg(&a, 0)?).is_ok())
    })?;
    env.add_overload(
        "string",
        "cidr_to_string",
        vec![CIDR_TYPE.to_owned()],
        |a| string_val(arg::<Cidr>(&a, 0)?.to_string()),
    )?;
    let t = || CIDR_TYPE.to_owned();
    env.add_member_overload(
        "containsIP",
        "cidr_contains_ip_string",
        t(),
        vec![STRING_TYPE],
        |a| {
            let c = arg::<Cidr>(&a, 0)?;
            let ip = parse_ip(string_arg(&a, 1)?).map_err(err)?;
            bool_val(c.contains(&ip))
        },
    )?;
    env.add_member_overload(
        "containsIP",
        "cidr_contains_ip_ip",
        t(),
        vec![IP_TYPE.to_owned()],
        |a| bool_val(arg::<Cidr>(&a, 0)?.contains(&arg::<Ip>(&a, 1)?.0)),
    )?;
    fn contains_cidr(c: &Cidr, other: &Cidr) -> bool {
        c.bits <= other.bits && c.contains(&other.addr)
    }
    env.add_member_overload(
        "containsCIDR",
        "cidr_contains_cidr_string",
        t(),
        vec![STRING_TYPE],
        |a| {
            let c = arg::<Cidr>(&a, 0)?;
            let other = parse_cidr(string_arg(&a, 1)?).map_err(|e| {
                err(format!(
                    "network address parse error during conversion from string: {e}"
                ))
            })?;
            bool_val(contains_cidr(c, &other))
        },
    )?;
    env.add_member_overload("containsCIDR", "cidr_contains_cidr", t(), vec![t()], |a| {
        bool_val(contains_cidr(arg::<Cidr>(&a, 0)?, arg::<Cidr>(&a, 1)?))
    })?;
    env.add_member_overload("ip", "cidr_ip", t(), vec![], |a| {
        Ok(CowVal::owned(Ip(arg::<Cidr>(&a, 0)?.addr)))
    })?;
    env.add_member_overload("prefixLength", "cidr_prefix_length", t(), vec![], |a| {
        int_val(i64::from(arg::<Cidr>(&a, 0)?.bits))
    })?;
    env.add_member_overload("masked", "cidr_masked", t(), vec![], |a| {
        Ok(CowVal::owned(arg::<Cidr>(&a, 0)?.masked()))
    })?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Quantities

/// A quantity, exactly: `num / den`, `den > 0`.
#[derive(Clone, Debug, PartialEq)]
pub struct Quantity {
    num: i128,
    den: i128,
}

opaque!(Quantity, QUANTITY_TYPE, "kubernetes.Quantity");

const QUANTITY_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

fn gcd(a: i128, b: i128) -> i128 {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1) as i128
}

impl Quantity {
    pub fn parse(s: &str) -> Result<Quantity, String> {
        match api::quantity::parse_quantity_exact(s) {
            Ok((num, den)) => Ok(Quantity::new(num, den)),
            Err(api::quantity::QuantityError::Syntax(_)) => Err(QUANTITY_FORMAT.into()),
            Err(api::quantity::QuantityError::OutOfRange(_)) => {
                Err("unable to parse numeric part of quantity".into())
            }
        }
    }

    fn new(num: i128, den: i128) -> Quantity {
        let g = gcd(num, den);
        Quantity {
            num: num / g,
            den: den / g,
        }
    }

    fn same(&self, other: &Quantity) -> bool {
        self.cmp(other) == Ordering::Equal
    }

    fn cmp(&self, other: &Quantity) -> Ordering {
        match (
            self.num.checked_mul(other.den),
            other.num.checked_mul(self.den),
        ) {
            (Some(a), Some(b)) => a.cmp(&b),
            _ => self
                .float()
                .partial_cmp(&other.float())
                .unwrap_or(Ordering::Equal),
        }
    }

    fn float(&self) -> f64 {
        self.num as f64 / self.den as f64
    }

    fn plus(&self, other: &Quantity, sign: i128) -> Result<Quantity, ExecutionError> {
        let overflow = || err("quantity arithmetic overflow");
        let den = self.den.checked_mul(other.den).ok_or_else(overflow)?;
        let a = self.num.checked_mul(other.den).ok_or_else(overflow)?;
        let b = other
            .num
            .checked_mul(self.den)
            .and_then(|b| b.checked_mul(sign))
            .ok_or_else(overflow)?;
        Ok(Quantity::new(a.checked_add(b).ok_or_else(overflow)?, den))
    }

    /// Go's `AsInt64`: the value when it is a whole number that fits.
    fn as_int(&self) -> Option<i64> {
        if self.num % self.den != 0 {
            return None;
        }
        i64::try_from(self.num / self.den).ok()
    }
}

fn quantity_arg<'a>(args: &'a [CowVal<'_, '_>], i: usize) -> Result<&'a Quantity, ExecutionError> {
    arg::<Quantity>(args, i)
}

fn quantities(env: &mut Env) -> Result<(), DeclarationError> {
    let t = || QUANTITY_TYPE.to_owned();
    env.add_overload("quantity", "string_to_quantity", vec![STRING_TYPE], |a| {
        Quantity::parse(string_arg(&a, 0)?)
            .map(CowVal::owned)
            .map_err(err)
    })?;
    env.add_overload("isQuantity", "is_quantity_string", vec![STRING_TYPE], |a| {
        bool_val(Quantity::parse(string_arg(&a, 0)?).is_ok())
    })?;
    env.add_overload("sign", "quantity_sign", vec![t()], |a| {
        int_val(quantity_arg(&a, 0)?.num.signum() as i64)
    })?;
    env.add_member_overload("isInteger", "quantity_is_integer", t(), vec![], |a| {
        bool_val(quantity_arg(&a, 0)?.as_int().is_some())
    })?;
    env.add_member_overload(
        "asInteger",
        "quantity_get_int",
        t(),
        vec![],
        |a| match quantity_arg(&a, 0)?.as_int() {
            Some(n) => int_val(n),
            None => Err(err("cannot convert value to integer")),
        },
    )?;
    env.add_member_overload(
        "asApproximateFloat",
        "quantity_get_float",
        t(),
        vec![],
        |a| Ok(CowVal::owned(CelDouble::from(quantity_arg(&a, 0)?.float()))),
    )?;
    env.add_member_overload("add", "quantity_add", t(), vec![t()], |a| {
        Ok(CowVal::owned(
            quantity_arg(&a, 0)?.plus(quantity_arg(&a, 1)?, 1)?,
        ))
    })?;
    env.add_member_overload("add", "quantity_add_int", t(), vec![INT_TYPE], |a| {
        let n = Quantity::new(i128::from(int_arg(&a, 1)?), 1);
        Ok(CowVal::owned(quantity_arg(&a, 0)?.plus(&n, 1)?))
    })?;
    env.add_member_overload("sub", "quantity_sub", t(), vec![t()], |a| {
        Ok(CowVal::owned(
            quantity_arg(&a, 0)?.plus(quantity_arg(&a, 1)?, -1)?,
        ))
    })?;
    env.add_member_overload("sub", "quantity_sub_int", t(), vec![INT_TYPE], |a| {
        let n = Quantity::new(i128::from(int_arg(&a, 1)?), 1);
        Ok(CowVal::owned(quantity_arg(&a, 0)?.plus(&n, -1)?))
    })?;
    env.add_member_overload("compareTo", "quantity_compare_to", t(), vec![t()], |a| {
        int_val(match quantity_arg(&a, 0)?.cmp(quantity_arg(&a, 1)?) {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        })
    })?;
    env.add_member_overload(
        "isGreaterThan",
        "quantity_is_greater_than",
        t(),
        vec![t()],
        |a| bool_val(quantity_arg(&a, 0)?.cmp(quantity_arg(&a, 1)?) == Ordering::Greater),
    )?;
    env.add_member_overload("isLessThan", "quantity_is_less_than", t(), vec![t()], |a| {
        bool_val(quantity_arg(&a, 0)?.cmp(quantity_arg(&a, 1)?) == Ordering::Less)
    })?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Formats

/// A named format (`kubernetes.NamedFormat`).
#[derive(Clone, Debug, PartialEq)]
pub struct Format(&'static str);

opaque!(Format, FORMAT_TYPE, "kubernetes.NamedFormat");

impl Format {
    fn same(&self, other: &Format) -> bool {
        self.0 == other.0
    }
}

/// The formats `format.named` knows, as kube names them.
pub const FORMATS: &[&str] = &[
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "qualifiedName",
    "dns1123LabelPrefix",
    "dns1123SubdomainPrefix",
    "dns1035LabelPrefix",
    "labelValue",
    "uri",
    "uuid",
    "byte",
    "date",
    "datetime",
];

/// apimachinery's `RegexError`.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{msg} (e.g. {}regex used for validation is '{fmt}')",
        examples.join(" or ")
    )
}

/// Whether all of `s` matches `fmt`; each format is compiled once (a handful of fixed ones).
fn matches_whole(fmt: &str, s: &str) -> bool {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static COMPILED: OnceLock<Mutex<HashMap<String, Option<regex::Regex>>>> = OnceLock::new();
    let mut compiled = COMPILED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    compiled
        .entry(fmt.to_string())
        .or_insert_with(|| regex::Regex::new(&format!("^(?:{fmt})$")).ok())
        .as_ref()
        .is_some_and(|re| re.is_match(s))
}

/// A name of at most `max` bytes matching `fmt`, with apimachinery's messages.
fn bounded_name(s: &str, max: usize, fmt: &str, msg: &str, examples: &[&str]) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > max {
        errs.push(format!("must be no more than {max} characters"));
    }
    if !matches_whole(fmt, s) {
        errs.push(regex_error(msg, fmt, examples));
    }
    errs
}

const LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const QNAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QNAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

fn dns1123_label(s: &str) -> Vec<String> {
    bounded_name(s, 63, LABEL_FMT, "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character", &["my-name", "123-abc"])
}

fn dns1123_subdomain(s: &str) -> Vec<String> {
    bounded_name(s, 253, SUBDOMAIN_FMT, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character", &["example.com"])
}

fn dns1035_label(s: &str) -> Vec<String> {
    bounded_name(s, 63, DNS1035_FMT, "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character", &["my-name", "abc-123"])
}

fn qualified_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|e| format!("prefix part {e}")),
                );
            }
            name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QNAME_MSG, QNAME_FMT, &["MyName", "my.name", "123-abc"])
            )]
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    }
    if !matches_whole(QNAME_FMT, name) {
        errs.push(format!(
            "name part {}",
            regex_error(QNAME_MSG, QNAME_FMT, &["MyName", "my.name", "123-abc"])
        ));
    }
    errs
}

fn label_value(s: &str) -> Vec<String> {
    let fmt = format!("({QNAME_FMT})?");
    bounded_name(s, 63, &fmt, "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character", &["MyValue", "my_value", "12345"])
}

/// apimachinery's `maskTrailingDash`, which the `...Prefix` formats validate through.
fn mask_trailing_dash(s: &str) -> String {
    if s.len() > 1 && s.ends_with('-') {
        format!("{}a", &s[..s.len() - 2])
    } else {
        s.to_string()
    }
}

fn is_base64(s: &str) -> bool {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(4) {
        return false;
    }
    let pad = b.iter().rev().take_while(|c| **c == b'=').count();
    pad <= 2
        && b[..b.len() - pad]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
}

fn is_uuid(s: &str) -> bool {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    let dashed = s.len() == 36
        && s.char_indices().all(|(i, c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    dashed || (s.len() == 32 && hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit()))
}

fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| s.get(r).and_then(|x| x.parse::<u32>().ok());
    match (num(0..4), num(5..7), num(8..10)) {
        (Some(y), Some(m), Some(d)) => {
            let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            let days = [
                31,
                if leap { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ];
            (1..=12).contains(&m) && d >= 1 && d <= days[(m - 1) as usize]
        }
        _ => false,
    }
}

/// A format's errors for `s`, none when it is valid.
pub fn validate_format(name: &str, s: &str) -> Vec<String> {
    let one = |ok: bool, msg: &str| if ok { vec![] } else { vec![msg.to_string()] };
    match name {
        "dns1123Label" => dns1123_label(s),
        "dns1123Subdomain" => dns1123_subdomain(s),
        "dns1035Label" => dns1035_label(s),
        "qualifiedName" => qualified_name(s),
        "dns1123LabelPrefix" => dns1123_label(&mask_trailing_dash(s)),
        "dns1123SubdomainPrefix" => dns1123_subdomain(&mask_trailing_dash(s)),
        "dns1035LabelPrefix" => dns1035_label(&mask_trailing_dash(s)),
        "labelValue" => label_value(s),
        "uri" => match parse_url(s, true) {
            Ok(_) => vec![],
            Err(e) => vec![e],
        },
        "uuid" => one(is_uuid(s), "does not match the UUID format"),
        "byte" => one(is_base64(s), "invalid base64"),
        "date" => one(is_date(s), "invalid date"),
        "datetime" => one(api::meta::Time::parse(s).is_ok(), "invalid datetime"),
        _ => vec![],
    }
}

fn format_named<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let name = string_arg(&args, 0)?;
    let found = FORMATS.iter().find(|f| **f == name);
    Ok(CowVal::owned(match found {
        Some(f) => CelOptional::of(Box::new(Format(f))),
        None => CelOptional::none(),
    }))
}

fn format_validate<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Res<'b, 'v> {
    let f = arg::<Format>(&args, 0)?;
    let errs = validate_format(f.0, string_arg(&args, 1)?);
    if errs.is_empty() {
        return Ok(CowVal::owned(CelOptional::none()));
    }
    let list: Vec<Box<dyn Val>> = errs
        .into_iter()
        .map(|e| Box::new(CelString::from(e)) as Box<dyn Val>)
        .collect();
    Ok(CowVal::owned(CelOptional::of(Box::new(CelList::from(
        list,
    )))))
}

fn formats(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(
        "format.named",
        "format-named",
        vec![STRING_TYPE],
        format_named,
    )?;
    env.add_member_overload(
        "validate",
        "format-validate",
        FORMAT_TYPE.to_owned(),
        vec![STRING_TYPE],
        format_validate,
    )?;
    // `format.dns1123Label()` and the others: one zero-argument function per format. A
    // function pointer cannot capture the name, so each is spelled out.
    macro_rules! constant {
        ($($name:literal),*) => {
            $(
                env.add_overload(concat!("format.", $name), concat!("format.", $name), vec![], |_| {
                    Ok(CowVal::owned(Format($name)))
                })?;
            )*
        };
    }
    constant!(
        "dns1123Label",
        "dns1123Subdomain",
        "dns1035Label",
        "qualifiedName",
        "dns1123LabelPrefix",
        "dns1123SubdomainPrefix",
        "dns1035LabelPrefix",
        "labelValue",
        "uri",
        "uuid",
        "byte",
        "date",
        "datetime"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Regex

fn compile_regex(re: &str) -> Result<regex::Regex, ExecutionError> {
    regex::Regex::new(re).map_err(|e| err(format!("error parsing regexp: {e}")))
}

fn regex(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload(
        "find",
        "string_find_string",
        STRING_TYPE,
        vec![STRING_TYPE],
        |a| {
            let re = compile_regex(string_arg(&a, 1)?)?;
            string_val(
                re.find(string_arg(&a, 0)?)
                    .map(|m| m.as_str())
                    .unwrap_or(""),
            )
        },
    )?;
    fn find_all<'b, 'v>(a: &[CowVal<'b, 'v>], limit: i64) -> Res<'b, 'v> {
        let re = compile_regex(string_arg(a, 1)?)?;
        let s = string_arg(a, 0)?;
        let take = if limit < 0 {
            usize::MAX
        } else {
            limit as usize
        };
        let found: Vec<Box<dyn Val>> = re
            .find_iter(s)
            .take(take)
            .map(|m| Box::new(CelString::from(m.as_str().to_string())) as Box<dyn Val>)
            .collect();
        Ok(CowVal::owned(CelList::from(found)))
    }
    env.add_member_overload(
        "findAll",
        "string_find_all_string",
        STRING_TYPE,
        vec![STRING_TYPE],
        |a| find_all(&a, -1),
    )?;
    env.add_member_overload(
        "findAll",
        "string_find_all_string_int",
        STRING_TYPE,
        vec![STRING_TYPE, INT_TYPE],
        |a| {
            let n = int_arg(&a, 2)?;
            find_all(&a, n)
        },
    )?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Lists

fn elements<'a, 'v>(list: &'a (dyn Val + 'v)) -> Result<Vec<&'a (dyn Val + 'v)>, ExecutionError> {
    let it = list
        .as_iterable()
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: list.get_type().name().to_owned(),
            want: "list".to_owned(),
        })?;
    let mut items = it.iter();
    let mut out = Vec::new();
    while let Some(i) = items.next() {
        out.push(i);
    }
    Ok(out)
}

fn compare(a: &dyn Val, b: &dyn Val) -> Result<Ordering, ExecutionError> {
    a.as_comparer()
        .ok_or_else(|| {
            ExecutionError::no_such_overload(
                "_<_",
                vec![
                    a.get_type().name().to_owned(),
                    b.get_type().name().to_owned(),
                ],
            )
        })?
        .compare(b)
}

fn extreme<'b, 'v>(args: Vec<CowVal<'b, 'v>>, name: &str, want: Ordering) -> Res<'b, 'v> {
    let items = elements(args[0].as_ref())?;
    let Some(mut best) = items.first().copied() else {
        return Err(err(format!("{name} called on empty list")));
    };
    for i in &items[1..] {
        if compare(*i, best)? == want {
            best = *i;
        }
    }
    Ok(CowVal::Owned(best.clone_as_boxed()))
}

fn lists(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload("isSorted", "list_is_sorted", LIST_TYPE, vec![], |a| {
        let items = elements(a[0].as_ref())?;
        for w in items.windows(2) {
            if compare(w[0], w[1])? == Ordering::Greater {
                return bool_val(false);
            }
        }
        bool_val(true)
    })?;
    env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], |a| {
        let items = elements(a[0].as_ref())?;
        let Some(first) = items.first() else {
            return int_val(0);
        };
        let mut acc: Box<dyn Val> = first.clone_as_boxed();
        for i in &items[1..] {
            let adder = acc.as_adder().ok_or_else(|| {
                ExecutionError::no_such_overload(
                    "_+_",
                    vec![
                        acc.get_type().name().to_owned(),
                        i.get_type().name().to_owned(),
                    ],
                )
            })?;
            let next = adder.add(*i)?.into_owned();
            acc = next;
        }
        Ok(CowVal::Owned(acc))
    })?;
    env.add_member_overload("min", "list_min", LIST_TYPE, vec![], |a| {
        extreme(a, "min", Ordering::Less)
    })?;
    env.add_member_overload("max", "list_max", LIST_TYPE, vec![], |a| {
        extreme(a, "max", Ordering::Greater)
    })?;
    env.add_member_overload("indexOf", "list_index_of", LIST_TYPE, vec![DYN_TYPE], |a| {
        let items = elements(a[0].as_ref())?;
        let pos = items.iter().position(|i| i.equals(a[1].as_ref()));
        int_val(pos.map_or(-1, |p| p as i64))
    })?;
    env.add_member_overload(
        "lastIndexOf",
        "list_last_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        |a| {
            let items = elements(a[0].as_ref())?;
            let pos = items.iter().rposition(|i| i.equals(a[1].as_ref()));
            int_val(pos.map_or(-1, |p| p as i64))
        },
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cel::Value;
    use std::sync::Arc;

    fn eval(src: &str) -> Result<Value, String> {
        let mut env = Env::stdlib();
        for ext in [cel::extensions::strings, cel::extensions::lists, extension] {
            env.add_extension(ext).unwrap();
        }
        let program = env.compile(src).map_err(|e| e.to_string())?;
        let ctx = cel::Context::with_env(Arc::new(env));
        program.execute(&ctx).map_err(|e| message(&e))
    }

    fn yes(src: &str) {
        assert_eq!(eval(src), Ok(Value::Bool(true)), "{src}");
    }

    fn fails(src: &str, msg: &str) {
        assert_eq!(eval(src), Err(msg.to_string()), "{src}");
    }

    #[test]
    fn urls() {
        yes("isURL('https://user:pass@example.com:80/path?query=val#fragment')");
        yes("isURL('/absolute-path')");
        yes("!isURL('https://a:b:c/')");
        yes("!isURL('../relative-path')");
        yes("url('/path').getScheme() == ''");
        yes("url('https://example.com/').getScheme() == 'https'");
        yes("url('HTTPS://example.com/').getScheme() == 'https'");
        yes("url('https://example.com:80/').getHost() == 'example.com:80'");
        yes("url('https://[::1]:80/').getHost() == '[::1]:80'");
        yes("url('https://[::1]/').getHostname() == '::1'");
        yes("url('https://127.0.0.1:80/').getHostname() == '127.0.0.1'");
        yes("url('https://example.com:443/').getPort() == '443'");
        yes("url('https://example.com/').getPort() == ''");
        yes("url('https://example.com/path with spaces/').getEscapedPath() == '/path%20with%20spaces/'");
        yes("url('https://example.com').getEscapedPath() == ''");
        yes("url('https://example.com/a%2Fb').getEscapedPath() == '/a%2Fb'");
        yes("url('https://example.com/path?k1=a&k2=b&k2=c').getQuery() == {'k1': ['a'], 'k2': ['b', 'c']}");
        yes("url('https://example.com/path?key with spaces=value with spaces').getQuery() == {'key with spaces': ['value with spaces']}");
        yes("url('https://example.com/path?').getQuery() == {}");
        yes("url('https://example.com/a#frag') == url('https://example.com/a#frag')");
        fails(
            "url('../relative-path')",
            "URL parse error during conversion from string: parse \"../relative-path\": invalid URI for request",
        );
        fails(
            "url('https://a:b:c/')",
            "URL parse error during conversion from string: parse \"https://a:b:c/\": invalid port \":c\" after host",
        );
        fails(
            "url('http://a b/')",
            "URL parse error during conversion from string: parse \"http://a b/\": invalid character \" \" in host name",
        );
        fails(
            "url('/a%zz')",
            "URL parse error during conversion from string: parse \"/a%zz\": invalid URL escape \"%zz\"",
        );
        fails(
            "url(':x')",
            "URL parse error during conversion from string: parse \":x\": missing protocol scheme",
        );
    }

    #[test]
    fn ips() {
        yes("isIP('192.168.0.1') && isIP('::1') && !isIP('1.2.3') && !isIP('fe80::1%eth0')");
        yes("!isIP('::ffff:1.2.3.4') && !isIP('01.2.3.4')");
        yes("ip('192.168.0.1').family() == 4 && ip('::1').family() == 6");
        yes("ip('0.0.0.0').isUnspecified() && ip('::').isUnspecified()");
        yes("ip('127.0.0.1').isLoopback() && ip('::1').isLoopback() && !ip('2001:db8::abcd').isLoopback()");
        yes("ip('224.0.0.1').isLinkLocalMulticast() && !ip('224.0.1.1').isLinkLocalMulticast()");
        yes("ip('ff02::1').isLinkLocalMulticast() && !ip('fd00::1').isLinkLocalMulticast()");
        yes("ip('169.254.169.254').isLinkLocalUnicast() && ip('fe80::1').isLinkLocalUnicast() && !ip('fd80::1').isLinkLocalUnicast()");
        yes("ip('192.168.0.1').isGlobalUnicast() && !ip('255.255.255.255').isGlobalUnicast()");
        yes("ip('2001:db8::abcd').isGlobalUnicast() && !ip('ff00::1').isGlobalUnicast()");
        yes("string(ip('2001:DB8:0:0::1')) == '2001:db8::1'");
        yes("ip.isCanonical('2001:db8::1') && !ip.isCanonical('2001:DB8::1')");
        yes("ip('10.0.0.1') == ip('10.0.0.1') && ip('10.0.0.1') != ip('10.0.0.2')");
        fails(
            "ip('foo')",
            "IP Address \"foo\" parse error during conversion from string: ParseAddr(\"foo\"): unable to parse IP",
        );
        fails(
            "ip('fe80::1%eth0')",
            "IP address \"fe80::1%eth0\" with zone value is not allowed",
        );
        fails(
            "ip('::ffff:1.2.3.4')",
            "IPv4-mapped IPv6 address \"::ffff:1.2.3.4\" is not allowed",
        );
    }

    #[test]
    fn cidrs() {
        yes("isCIDR('192.168.0.0/24') && !isCIDR('192.168.0.0') && !isCIDR('10.0.0.0/33')");
        yes("cidr('192.168.0.0/24').containsIP(ip('192.168.0.1')) && !cidr('192.168.0.0/24').containsIP('192.168.1.1')");
        yes("cidr('192.168.0.0/24').containsIP('192.168.0.1') && !cidr('::/0').containsIP('1.2.3.4')");
        yes("cidr('192.168.0.0/16').containsCIDR('192.168.10.0/24') && !cidr('192.168.0.0/24').containsCIDR('192.168.0.0/16')");
        yes("cidr('192.168.0.0/16').containsCIDR(cidr('192.168.0.0/16'))");
        yes("cidr('192.168.0.1/24').ip() == ip('192.168.0.1') && cidr('::1/128').ip().family() == 6");
        yes("cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')");
        yes("cidr('192.168.0.1/24') != cidr('192.168.0.1/24').masked()");
        yes("cidr('192.168.0.0/16').prefixLength() == 16 && cidr('::1/128').prefixLength() == 128");
        yes("string(cidr('2001:db8::/32')) == '2001:db8::/32'");
        fails(
            "cidr('10.0.0.0')",
            "network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix(\"10.0.0.0\"): no '/'",
        );
        fails(
            "cidr('10.0.0.0/33')",
            "network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix(\"10.0.0.0/33\"): prefix length out of range",
        );
    }

    #[test]
    fn quantities() {
        yes("isQuantity('1.5Gi') && isQuantity('100m') && !isQuantity('1.5x') && !isQuantity('')");
        yes("quantity('1') == quantity('1000m') && quantity('1Ki') == quantity('1024')");
        yes("sign(quantity('-1')) == -1 && sign(quantity('0')) == 0 && sign(quantity('5')) == 1");
        yes("quantity('1k').isInteger() && !quantity('100m').isInteger() && quantity('1k').asInteger() == 1000");
        yes("quantity('50m').asApproximateFloat() == 0.05");
        yes("quantity('50k').add(quantity('20k')) == quantity('70k') && quantity('50k').add(20) == quantity('50020')");
        yes("quantity('50k').sub(quantity('20k')) == quantity('30k') && quantity('50k').sub(20) == quantity('49980')");
        yes("quantity('50M').compareTo(quantity('50Mi')) == -1 && quantity('1').compareTo(quantity('1000m')) == 0");
        yes("quantity('1Gi').isGreaterThan(quantity('1G')) && quantity('1G').isLessThan(quantity('1Gi'))");
        fails(
            "quantity('100m').asInteger()",
            "cannot convert value to integer",
        );
        fails(
            "quantity('1.5x')",
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        );
    }

    #[test]
    fn formats() {
        yes("!format.dns1123Label().validate('my-label-name').hasValue()");
        yes("format.dns1123Label().validate('My_Label').value() == [\"a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')\"]");
        yes(
            "!format.named('dns1123Subdomain').value().validate('apiextensions.k8s.io').hasValue()",
        );
        yes("!format.named('nope').hasValue()");
        yes("!format.dns1035Label().validate('my-label').hasValue() && format.dns1035Label().validate('1abc').hasValue()");
        yes("!format.qualifiedName().validate('apiextensions.k8s.io/v1beta1').hasValue()");
        yes("format.qualifiedName().validate('/x').value()[0] == 'prefix part must be non-empty'");
        yes("!format.dns1123LabelPrefix().validate('my-label-prefix-').hasValue()");
        yes("!format.labelValue().validate('').hasValue() && format.labelValue().validate('-x').hasValue()");
        yes("!format.uri().validate('http://example.com').hasValue()");
        yes("format.uri().validate('x').value() == ['parse \"x\": invalid URI for request']");
        yes("!format.uuid().validate('123e4567-e89b-12d3-a456-426614174000').hasValue()");
        yes("format.uuid().validate('x').value() == ['does not match the UUID format']");
        yes("!format.byte().validate('aGVsbG8=').hasValue() && format.byte().validate('a').value() == ['invalid base64']");
        yes("!format.date().validate('2021-01-01').hasValue() && format.date().validate('2021-02-30').value() == ['invalid date']");
        yes("!format.datetime().validate('2021-01-01T00:00:00Z').hasValue() && format.datetime().validate('x').value() == ['invalid datetime']");
    }

    #[test]
    fn regex_and_lists() {
        yes("'abc 123'.find('[0-9]+') == '123' && 'abc'.find('[0-9]+') == ''");
        yes("'123 abc 456'.findAll('[0-9]+') == ['123', '456'] && '123 abc 456'.findAll('[0-9]+', 1) == ['123']");
        yes("[1, 2, 3].isSorted() && !['b', 'a'].isSorted() && [].isSorted()");
        yes("[1, 2, 3].sum() == 6 && [1.5, 2.5].sum() == 4.0 && [].sum() == 0");
        yes("[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3 && ['b', 'c', 'a'].max() == 'c'");
        yes("[1, 2, 3, 2].indexOf(2) == 1 && [1, 2, 3, 2].lastIndexOf(2) == 3 && [1].indexOf(5) == -1");
        yes("'abcb'.indexOf('b') == 1");
        fails("[].min()", "min called on empty list");
        fails("[].max()", "max called on empty list");
    }
}
