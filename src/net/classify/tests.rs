//! Table-driven tests of address classification: range edges, embedded IPv4 forms, metadata.

use std::net::IpAddr;

use super::{Blocked, classify, is_cloud_metadata};

/// Each row: an address and the range that blocks it, or `None` when it must be allowed.
/// Blocked ranges list their first and last address; "just outside" rows use public neighbours.
const IPV4_TABLE: &[(&str, Option<&str>)] = &[
    ("0.0.0.0", Some("unspecified")),
    ("0.0.0.1", Some("this-network")),
    ("0.255.255.255", Some("this-network")),
    ("1.0.0.0", None),
    ("9.255.255.255", None),
    ("10.0.0.0", Some("private")),
    ("10.255.255.255", Some("private")),
    ("11.0.0.0", None),
    ("100.63.255.255", None),
    ("100.64.0.0", Some("cgnat")),
    ("100.127.255.255", Some("cgnat")),
    ("100.128.0.0", None),
    ("126.255.255.255", None),
    ("127.0.0.0", Some("loopback")),
    ("127.0.0.1", Some("loopback")),
    ("127.255.255.255", Some("loopback")),
    ("128.0.0.0", None),
    ("169.253.255.255", None),
    ("169.254.0.0", Some("link-local")),
    ("169.254.255.255", Some("link-local")),
    ("169.255.0.0", None),
    ("172.15.255.255", None),
    ("172.16.0.0", Some("private")),
    ("172.31.255.255", Some("private")),
    ("172.32.0.0", None),
    ("191.255.255.255", None),
    ("192.0.0.0", Some("protocol-assignments")),
    ("192.0.0.255", Some("protocol-assignments")),
    ("192.0.1.0", None),
    ("192.0.1.255", None),
    ("192.0.2.0", Some("documentation")),
    ("192.0.2.255", Some("documentation")),
    ("192.0.3.0", None),
    ("192.31.196.0", Some("as112")),
    ("192.31.196.255", Some("as112")),
    ("192.52.193.0", Some("amt")),
    ("192.52.193.255", Some("amt")),
    ("192.88.98.255", None),
    ("192.88.99.0", Some("6to4-relay")),
    ("192.88.99.255", Some("6to4-relay")),
    ("192.88.100.0", None),
    ("192.167.255.255", None),
    ("192.168.0.0", Some("private")),
    ("192.168.255.255", Some("private")),
    ("192.169.0.0", None),
    ("192.175.48.0", Some("as112")),
    ("192.175.48.255", Some("as112")),
    ("198.17.255.255", None),
    ("198.18.0.0", Some("benchmarking")),
    ("198.19.255.255", Some("benchmarking")),
    ("198.20.0.0", None),
    ("198.51.99.255", None),
    ("198.51.100.0", Some("documentation")),
    ("198.51.100.255", Some("documentation")),
    ("198.51.101.0", None),
    ("203.0.112.255", None),
    ("203.0.113.0", Some("documentation")),
    ("203.0.113.255", Some("documentation")),
    ("203.0.114.0", None),
    ("223.255.255.255", None),
    ("224.0.0.0", Some("multicast")),
    ("239.255.255.255", Some("multicast")),
    ("240.0.0.0", Some("reserved")),
    ("255.255.255.254", Some("reserved")),
    ("255.255.255.255", Some("broadcast")),
    ("8.8.8.8", None),
    ("93.184.215.14", None),
    ("169.254.169.254", Some("cloud-metadata")),
    ("169.254.170.2", Some("cloud-metadata")),
    ("100.100.100.200", Some("cloud-metadata")),
    ("192.0.0.192", Some("cloud-metadata")),
];

const IPV6_TABLE: &[(&str, Option<&str>)] = &[
    ("::", Some("unspecified")),
    ("::1", Some("loopback")),
    ("::2", Some("ipv4-compatible")),
    ("::ffff:ffff", Some("ipv4-compatible")),
    ("::1:0:0", Some("reserved")),
    ("::ffff:0:0", Some("ipv4-mapped")),
    ("::ffff:ffff:ffff", Some("ipv4-mapped")),
    ("64:ff9b:1::", Some("nat64")),
    ("64:ff9b:1:ffff:ffff:ffff:ffff:ffff", Some("nat64")),
    ("100::", Some("discard")),
    ("100::ffff:ffff:ffff:ffff", Some("discard")),
    ("100:0:0:1::", Some("dummy")),
    ("100:0:0:1:ffff:ffff:ffff:ffff", Some("dummy")),
    ("1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Some("reserved")),
    ("2000::", None),
    ("2001::", Some("teredo")),
    ("2001:0:ffff:ffff:ffff:ffff:ffff:ffff", Some("teredo")),
    ("2001:1::1", Some("protocol-assignments")),
    ("2001:2::", Some("benchmarking")),
    ("2001:2:0:ffff:ffff:ffff:ffff:ffff", Some("benchmarking")),
    (
        "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
        Some("protocol-assignments"),
    ),
    ("2001:200::", None),
    ("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", None),
    ("2001:db8::", Some("documentation")),
    (
        "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
        Some("documentation"),
    ),
    ("2001:db9::", None),
    ("2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None),
    ("2002::", Some("6to4")),
    ("2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Some("6to4")),
    ("2003::", None),
    ("2620:4f:7fff:ffff:ffff:ffff:ffff:ffff", None),
    ("2620:4f:8000::", Some("as112")),
    ("2620:4f:8000:ffff:ffff:ffff:ffff:ffff", Some("as112")),
    ("2620:4f:8001::", None),
    ("3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None),
    ("3fff::", Some("documentation")),
    (
        "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff",
        Some("documentation"),
    ),
    ("3fff:1000::", None),
    ("3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None),
    ("4000::", Some("reserved")),
    ("5f00::", Some("srv6")),
    ("5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Some("srv6")),
    ("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Some("reserved")),
    ("fc00::", Some("unique-local")),
    (
        "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        Some("unique-local"),
    ),
    ("fe00::", Some("reserved")),
    ("fe80::", Some("link-local")),
    (
        "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        Some("link-local"),
    ),
    ("fec0::", Some("site-local")),
    (
        "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        Some("site-local"),
    ),
    ("ff00::", Some("multicast")),
    ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Some("multicast")),
    ("2606:4700:4700::1111", None),
    ("fd00:ec2::254", Some("cloud-metadata")),
    ("fd00:ec2::253", Some("unique-local")),
];

/// IPv6 forms carrying a blocked IPv4 address (127.0.0.1, 10.0.0.1 or 169.254.169.254).
const EMBEDDED_TABLE: &[(&str, Option<&str>)] = &[
    ("::ffff:127.0.0.1", Some("ipv4-mapped")),
    ("::ffff:10.0.0.1", Some("ipv4-mapped")),
    ("::ffff:169.254.169.254", Some("ipv4-mapped")),
    // Outright: even a public IPv4 address in these forms is refused.
    ("::ffff:8.8.8.8", Some("ipv4-mapped")),
    ("::127.0.0.1", Some("ipv4-compatible")),
    ("::8.8.8.8", Some("ipv4-compatible")),
    ("64:ff9b::127.0.0.1", Some("nat64")),
    ("64:ff9b::10.0.0.1", Some("nat64")),
    ("64:ff9b::169.254.169.254", Some("nat64")),
    ("64:ff9b::0.0.0.0", Some("nat64")),
    // The well-known NAT64 prefix is judged by what it embeds: DNS64 networks need it.
    ("64:ff9b::8.8.8.8", None),
    ("64:ff9b:1::7f00:1", Some("nat64")),
    ("2002:7f00:1::", Some("6to4")),
    ("2002:a9fe:a9fe::1", Some("6to4")),
    ("2002:808:808::1", Some("6to4")),
    // Teredo: server 127.0.0.1 in clear; client 10.0.0.1 inverted (f5ff:fffe).
    ("2001:0:7f00:1::", Some("teredo")),
    ("2001:0:808:808::f5ff:fffe", Some("teredo")),
];

fn check_table(table: &[(&str, Option<&str>)]) {
    for (text, expected) in table {
        let ip: IpAddr = text.parse().expect("table addresses are valid");
        let got = classify(ip).err().map(|Blocked { range }| range);
        assert_eq!(got, *expected, "classify({text})");
    }
}

#[test]
fn ipv4_ranges_edges_and_neighbours() {
    check_table(IPV4_TABLE);
}

#[test]
fn ipv6_ranges_edges_and_neighbours() {
    check_table(IPV6_TABLE);
}

#[test]
fn ipv6_forms_embedding_blocked_ipv4() {
    check_table(EMBEDDED_TABLE);
}

#[test]
fn metadata_is_seen_through_every_embedding() {
    let metadata = [
        "169.254.169.254",
        "169.254.170.2",
        "100.100.100.200",
        "192.0.0.192",
        "fd00:ec2::254",
        "::ffff:169.254.169.254",
        "::169.254.169.254",
        "64:ff9b::169.254.169.254",
        "2002:a9fe:a9fe::",
        // Teredo server field, then client field (169.254.169.254 inverted).
        "2001:0:a9fe:a9fe::",
        "2001:0:808:808::5601:5601",
    ];
    for text in metadata {
        let ip: IpAddr = text.parse().expect("valid address");
        assert!(is_cloud_metadata(ip), "{text} is a metadata endpoint");
    }
    let not_metadata = [
        "127.0.0.1",
        "169.254.169.253",
        "10.0.0.1",
        "::ffff:127.0.0.1",
        "64:ff9b::8.8.8.8",
        "2002:7f00:1::",
        "fd00:ec2::253",
        "2001:0:808:808::f5ff:fffe",
    ];
    for text in not_metadata {
        let ip: IpAddr = text.parse().expect("valid address");
        assert!(!is_cloud_metadata(ip), "{text} is not a metadata endpoint");
    }
}
