//! Address classification: which IP addresses an outbound request may never reach.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is refused: the name of the special-purpose range it falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    pub range: &'static str,
}

/// Cloud instance-metadata endpoints. They hand out credentials to anything on the host, so
/// they stay blocked even when a policy permits private addresses.
const METADATA_V4: [Ipv4Addr; 4] = [
    // AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle (current).
    Ipv4Addr::new(169, 254, 169, 254),
    // AWS ECS task credentials.
    Ipv4Addr::new(169, 254, 170, 2),
    // Alibaba Cloud.
    Ipv4Addr::new(100, 100, 100, 200),
    // Oracle Cloud (legacy).
    Ipv4Addr::new(192, 0, 0, 192),
];

/// AWS instance metadata over IPv6 (Nitro).
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// IANA IPv4 special-purpose registry, most specific first (the first match names the range).
/// Globally reachable entries (AS112, AMT) are blocked too: no tool server lives there.
const V4_RANGES: &[(Ipv4Addr, u8, &str)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 32, "unspecified"),
    (Ipv4Addr::new(0, 0, 0, 0), 8, "this-network"),
    (Ipv4Addr::new(10, 0, 0, 0), 8, "private"),
    (Ipv4Addr::new(100, 64, 0, 0), 10, "cgnat"),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "loopback"),
    (Ipv4Addr::new(169, 254, 0, 0), 16, "link-local"),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "private"),
    (Ipv4Addr::new(192, 0, 0, 0), 24, "protocol-assignments"),
    (Ipv4Addr::new(192, 0, 2, 0), 24, "documentation"),
    (Ipv4Addr::new(192, 31, 196, 0), 24, "as112"),
    (Ipv4Addr::new(192, 52, 193, 0), 24, "amt"),
    (Ipv4Addr::new(192, 88, 99, 0), 24, "6to4-relay"),
    (Ipv4Addr::new(192, 168, 0, 0), 16, "private"),
    (Ipv4Addr::new(192, 175, 48, 0), 24, "as112"),
    (Ipv4Addr::new(198, 18, 0, 0), 15, "benchmarking"),
    (Ipv4Addr::new(198, 51, 100, 0), 24, "documentation"),
    (Ipv4Addr::new(203, 0, 113, 0), 24, "documentation"),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast"),
    (Ipv4Addr::new(255, 255, 255, 255), 32, "broadcast"),
    (Ipv4Addr::new(240, 0, 0, 0), 4, "reserved"),
];

/// IANA IPv6 special-purpose registry plus the non-unicast blocks, most specific first.
///
/// The forms that embed an IPv4 address are blocked outright, whatever the embedded address:
/// IPv4-mapped (a dual-stack socket connects to the embedded IPv4 host), IPv4-compatible
/// (deprecated), 6to4 (deprecated, RFC 7526), Teredo (the client address is obfuscated) and the
/// local-use NAT64 prefix (its embedding position depends on the local prefix length). No public
/// tool server needs them, and they exist mainly to slip a private IPv4 address past a filter
/// that only looks at IPv6 ranges. The one exception is the well-known NAT64 prefix, which
/// DNS64 resolvers on IPv6-only networks return for every IPv4-only host: it is judged by
/// the IPv4 address it embeds (see [`classify_v6`]).
const V6_RANGES: &[(Ipv6Addr, u8, &str)] = &[
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 128, "unspecified"),
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 1), 128, "loopback"),
    (
        Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0),
        96,
        "ipv4-mapped",
    ),
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 96, "ipv4-compatible"),
    (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48, "nat64"),
    (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64, "discard"),
    (Ipv6Addr::new(0x100, 0, 0, 1, 0, 0, 0, 0), 64, "dummy"),
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32, "teredo"),
    (
        Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0),
        48,
        "benchmarking",
    ),
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        23,
        "protocol-assignments",
    ),
    (
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
        32,
        "documentation",
    ),
    (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16, "6to4"),
    (
        Ipv6Addr::new(0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0),
        48,
        "as112",
    ),
    (
        Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0),
        20,
        "documentation",
    ),
    (Ipv6Addr::new(0x5f00, 0, 0, 0, 0, 0, 0, 0), 16, "srv6"),
    (
        Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
        7,
        "unique-local",
    ),
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, "link-local"),
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10, "site-local"),
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, "multicast"),
];

/// Well-known NAT64 prefix (RFC 6052): the IPv4 address sits in the last 32 bits.
const NAT64_WELL_KNOWN: (Ipv6Addr, u8) = (Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96);

/// Global unicast (2000::/3): IANA has allocated nothing else for public use, so anything
/// outside it that no entry above names is reserved space.
const GLOBAL_UNICAST: (Ipv6Addr, u8) = (Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3);

/// Whether `ip` is a public address an outbound request may reach.
pub fn classify(ip: IpAddr) -> Result<(), Blocked> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// Whether `ip` is (or embeds) a cloud metadata endpoint.
pub fn is_cloud_metadata(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => METADATA_V4.contains(&v4),
        IpAddr::V6(v6) => v6 == METADATA_V6 || embedded_v4(v6).any(|v4| METADATA_V4.contains(&v4)),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Result<(), Blocked> {
    if METADATA_V4.contains(&ip) {
        return Err(Blocked {
            range: "cloud-metadata",
        });
    }
    let bits = ip.to_bits();
    match V4_RANGES
        .iter()
        .find(|(net, len, _)| prefix_match_v4(bits, net.to_bits(), *len))
    {
        Some((_, _, range)) => Err(Blocked { range }),
        None => Ok(()),
    }
}

fn classify_v6(ip: Ipv6Addr) -> Result<(), Blocked> {
    if ip == METADATA_V6 {
        return Err(Blocked {
            range: "cloud-metadata",
        });
    }
    let bits = ip.to_bits();
    if let Some((_, _, range)) = V6_RANGES
        .iter()
        .find(|(net, len, _)| prefix_match_v6(bits, net.to_bits(), *len))
    {
        return Err(Blocked { range });
    }
    let (nat64, nat64_len) = NAT64_WELL_KNOWN;
    if prefix_match_v6(bits, nat64.to_bits(), nat64_len) {
        // Truncation keeps exactly the low 32 bits, where RFC 6052 puts the IPv4 address.
        let embedded = Ipv4Addr::from_bits(bits as u32);
        return classify_v4(embedded).map_err(|_| Blocked { range: "nat64" });
    }
    let (global, global_len) = GLOBAL_UNICAST;
    if prefix_match_v6(bits, global.to_bits(), global_len) {
        Ok(())
    } else {
        Err(Blocked { range: "reserved" })
    }
}

/// Every IPv4 address an IPv6 address may carry, for the metadata check that must see through
/// all embedding forms.
fn embedded_v4(ip: Ipv6Addr) -> impl Iterator<Item = Ipv4Addr> {
    let bits = ip.to_bits();
    let low = Ipv4Addr::from_bits(bits as u32);
    let seg = ip.segments();
    let mapped_or_compat = bits >> 32 == 0xffff || bits >> 32 == 0;
    let nat64 = prefix_match_v6(bits, NAT64_WELL_KNOWN.0.to_bits(), NAT64_WELL_KNOWN.1);
    let six_to_four = (seg[0] == 0x2002).then(|| v4_from_segments(seg[1], seg[2]));
    let teredo = (seg[0] == 0x2001 && seg[1] == 0).then(|| {
        // Teredo carries the server address in clear and the client address inverted.
        [
            v4_from_segments(seg[2], seg[3]),
            v4_from_segments(!seg[6], !seg[7]),
        ]
    });
    (mapped_or_compat || nat64)
        .then_some(low)
        .into_iter()
        .chain(six_to_four)
        .chain(teredo.into_iter().flatten())
}

fn v4_from_segments(high: u16, low: u16) -> Ipv4Addr {
    Ipv4Addr::from_bits((u32::from(high) << 16) | u32::from(low))
}

fn prefix_match_v4(addr: u32, net: u32, len: u8) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    addr & mask == net & mask
}

fn prefix_match_v6(addr: u128, net: u128, len: u8) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    addr & mask == net & mask
}

#[cfg(test)]
mod tests;
