//! Which IP addresses are internal: loopback, private, link-local, or not meant to be reached
//! at all (documentation, benchmarking, reserved, multicast).
//!
//! IPv6 forms that carry an IPv4 address inside are classified by that address, so
//! `::ffff:127.0.0.1`, `64:ff9b::7f00:1` (NAT64) and `2002:7f00:1::` (6to4) are all loopback:
//! - IPv4-mapped `::ffff:a.b.c.d`, IPv4-translated `::ffff:0:a.b.c.d` and the deprecated
//!   IPv4-compatible `::a.b.c.d`;
//! - NAT64: the well-known `64:ff9b::/96` and the local-use `64:ff9b:1::/48` (taken, like the
//!   well-known prefix, with the IPv4 address in the last 32 bits: the /96 layout DNS64
//!   deployments use);
//! - 6to4 `2002::/16`, the IPv4 address in bits 16..48;
//! - Teredo `2001::/32`: the server's IPv4 address in bits 32..64 and the client's, inverted, in
//!   the last 32 bits; either being internal makes the address internal.
//!
//! ```
//! use talaria_runtime::{AddressKind, internal_kind};
//! assert_eq!(internal_kind("64:ff9b::7f00:1".parse().unwrap()), Some(AddressKind::Loopback));
//! assert_eq!(internal_kind("93.184.216.34".parse().unwrap()), None);
//! ```

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is internal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressKind {
    /// This machine (`127.0.0.0/8`, `::1`).
    Loopback,
    /// A private network: RFC 1918, shared address space (`100.64.0.0/10`), IPv6 unique-local
    /// and site-local.
    Private,
    /// `169.254.0.0/16` (where cloud metadata endpoints live), `fe80::/10`.
    LinkLocal,
    /// Unspecified, documentation, benchmarking, reserved, multicast or broadcast.
    NonRoutable,
}

impl AddressKind {
    /// In words: "loopback", "private", "link-local" or "non-routable".
    pub fn name(self) -> &'static str {
        match self {
            AddressKind::Loopback => "loopback",
            AddressKind::Private => "private",
            AddressKind::LinkLocal => "link-local",
            AddressKind::NonRoutable => "non-routable",
        }
    }
}

impl fmt::Display for AddressKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

use AddressKind::{LinkLocal, Loopback, NonRoutable, Private};

/// IPv4 ranges (network, prefix length) that are internal, most specific kinds first.
const V4_RANGES: &[([u8; 4], u32, AddressKind)] = &[
    ([127, 0, 0, 0], 8, Loopback),
    ([10, 0, 0, 0], 8, Private),
    ([172, 16, 0, 0], 12, Private),
    ([192, 168, 0, 0], 16, Private),
    ([100, 64, 0, 0], 10, Private),
    ([169, 254, 0, 0], 16, LinkLocal),
    ([0, 0, 0, 0], 8, NonRoutable),
    ([192, 0, 0, 0], 24, NonRoutable),
    ([192, 0, 2, 0], 24, NonRoutable),
    ([198, 18, 0, 0], 15, NonRoutable),
    ([198, 51, 100, 0], 24, NonRoutable),
    ([203, 0, 113, 0], 24, NonRoutable),
    ([224, 0, 0, 0], 4, NonRoutable),
    ([240, 0, 0, 0], 4, NonRoutable),
];

/// IPv6 ranges that are internal and carry no IPv4 address.
const V6_RANGES: &[(u128, u32, AddressKind)] = &[
    (1, 128, Loopback),
    (0, 128, NonRoutable),
    (0xfc00 << 112, 7, Private),
    (0xfec0 << 112, 10, Private),
    (0xfe80 << 112, 10, LinkLocal),
    (0xff00 << 112, 8, NonRoutable),
    (0x2001_0db8 << 96, 32, NonRoutable),
    (0x3fff << 112, 20, NonRoutable),
    (0x2001_0002_0000 << 80, 48, NonRoutable),
    (0x0100 << 112, 64, NonRoutable),
];

/// Why `ip` counts as internal, if it does.
pub fn internal_kind(ip: IpAddr) -> Option<AddressKind> {
    match ip {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => v6_kind(v6),
    }
}

fn v4_kind(ip: Ipv4Addr) -> Option<AddressKind> {
    let bits = u32::from(ip);
    // Every prefix length in the table is between 4 and 32, so the shifts stay in range.
    V4_RANGES
        .iter()
        .find(|(net, len, _)| bits >> (32 - len) == u32::from_be_bytes(*net) >> (32 - len))
        .map(|(_, _, kind)| *kind)
}

fn v6_kind(ip: Ipv6Addr) -> Option<AddressKind> {
    let bits = u128::from(ip);
    // Every prefix length in the table is between 7 and 128, so the shifts stay in range.
    let in_range = |net: u128, len: u32| bits >> (128 - len) == net >> (128 - len);
    if let Some(kind) = V6_RANGES.iter().find(|(net, len, _)| in_range(*net, *len)).map(|(_, _, kind)| *kind) {
        return Some(kind);
    }
    embedded_v4(bits).into_iter().flatten().find_map(v4_kind)
}

/// The IPv4 addresses an IPv6 address carries, by the forms in the module docs.
fn embedded_v4(bits: u128) -> [Option<Ipv4Addr>; 2] {
    // Truncating casts pick out the 32 bits named.
    let last = Ipv4Addr::from(bits as u32);
    let prefix96 = bits >> 32;
    if prefix96 == 0xffff || prefix96 == 0xffff_0000 || prefix96 == 0 || prefix96 == 0x0064_ff9b << 64 {
        return [Some(last), None];
    }
    if bits >> 80 == 0x0064_ff9b_0001 {
        return [Some(last), None];
    }
    if bits >> 112 == 0x2002 {
        return [Some(Ipv4Addr::from((bits >> 80) as u32)), None];
    }
    if bits >> 96 == 0x2001_0000 {
        let server = Ipv4Addr::from((bits >> 64) as u32);
        let client = Ipv4Addr::from(!(bits as u32));
        return [Some(client), Some(server)];
    }
    [None, None]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_is_classified() {
        let table: &[(&str, Option<AddressKind>)] = &[
            // IPv4
            ("127.0.0.1", Some(Loopback)),
            ("127.255.255.254", Some(Loopback)),
            ("10.1.2.3", Some(Private)),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("172.32.0.1", None),
            ("192.168.0.1", Some(Private)),
            ("100.64.0.1", Some(Private)),
            ("100.127.255.255", Some(Private)),
            ("100.128.0.1", None),
            ("169.254.169.254", Some(LinkLocal)),
            ("0.0.0.0", Some(NonRoutable)),
            ("0.1.2.3", Some(NonRoutable)),
            ("192.0.0.8", Some(NonRoutable)),
            ("192.0.2.1", Some(NonRoutable)),
            ("198.18.0.1", Some(NonRoutable)),
            ("198.19.255.255", Some(NonRoutable)),
            ("198.20.0.1", None),
            ("198.51.100.7", Some(NonRoutable)),
            ("203.0.113.9", Some(NonRoutable)),
            ("224.0.0.1", Some(NonRoutable)),
            ("240.0.0.1", Some(NonRoutable)),
            ("255.255.255.255", Some(NonRoutable)),
            ("93.184.216.34", None),
            ("8.8.8.8", None),
            // IPv6 without IPv4 inside
            ("::1", Some(Loopback)),
            ("::", Some(NonRoutable)),
            ("fd00::1", Some(Private)),
            ("fc00::1", Some(Private)),
            ("fec0::1", Some(Private)),
            ("feff::1", Some(Private)),
            ("fe80::1", Some(LinkLocal)),
            ("febf::1", Some(LinkLocal)),
            ("ff02::1", Some(NonRoutable)),
            ("2001:db8::1", Some(NonRoutable)),
            ("3fff::1", Some(NonRoutable)),
            ("2001:2::1", Some(NonRoutable)),
            ("100::1", Some(NonRoutable)),
            ("100:0:0:1::1", None),
            ("2606:4700::1111", None),
            ("2a00:1450:4001::200e", None),
            // IPv4-mapped, -translated and -compatible
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:10.0.0.1", Some(Private)),
            ("::ffff:169.254.169.254", Some(LinkLocal)),
            ("::ffff:8.8.8.8", None),
            ("::ffff:0:127.0.0.1", Some(Loopback)),
            ("::ffff:0:192.168.1.1", Some(Private)),
            ("::ffff:0:8.8.8.8", None),
            ("::127.0.0.1", Some(Loopback)),
            ("::169.254.169.254", Some(LinkLocal)),
            ("::8.8.8.8", None),
            // NAT64
            ("64:ff9b::7f00:1", Some(Loopback)),
            ("64:ff9b::127.0.0.1", Some(Loopback)),
            ("64:ff9b::a9fe:a9fe", Some(LinkLocal)),
            ("64:ff9b::c0a8:101", Some(Private)),
            ("64:ff9b::808:808", None),
            ("64:ff9b:1::7f00:1", Some(Loopback)),
            ("64:ff9b:1:abcd::a00:1", Some(Private)),
            ("64:ff9b:1::808:808", None),
            // 6to4
            ("2002:7f00:1::", Some(Loopback)),
            ("2002:a9fe:a9fe::1", Some(LinkLocal)),
            ("2002:c0a8:101:1::1", Some(Private)),
            ("2002:808:808::1", None),
            // Teredo: server 65.54.227.120; client inverted in the last 32 bits
            ("2001:0:4136:e378:8000:63bf:80ff:fffe", Some(Loopback)),
            ("2001:0:4136:e378:8000:63bf:f5ff:fff5", Some(Private)),
            ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", None),
            ("2001:0:7f00:1:8000:63bf:f7f7:f7f7", Some(Loopback)),
        ];
        for (addr, want) in table {
            let ip: IpAddr = addr.parse().unwrap_or_else(|e| panic!("{addr}: {e}"));
            assert_eq!(internal_kind(ip), *want, "{addr}");
        }
    }

    #[test]
    fn kinds_read_as_words() {
        let words: Vec<String> = [Loopback, Private, LinkLocal, NonRoutable].iter().map(ToString::to_string).collect();
        assert_eq!(words, ["loopback", "private", "link-local", "non-routable"]);
    }
}
