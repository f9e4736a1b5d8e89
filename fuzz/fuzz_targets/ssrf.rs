//! URL and address classification against SSRF: no URL the default policy lets through, and
//! no address it calls public, lies in a range a reference model (written here, from IANA's
//! special-purpose registries) blocks.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use mcpgate::net::{NetPolicy, check_url, classify};

fn v4_blocked(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    a == 0
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b))
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 0 && (c == 0 || c == 2))
        || (a == 192 && b == 88 && c == 99)
        || (a == 192 && b == 168)
        || (a == 198 && (b == 18 || b == 19))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || a >= 224
}

fn v6_blocked(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| {
        v4_blocked(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        ))
    };
    ip.is_unspecified()
        || ip.is_loopback()
        // IPv4-mapped and -compatible: the IPv4 address decides.
        || (s[..5] == [0; 5] && (s[5] == 0xffff || s[5] == 0) && embedded(s[6], s[7]))
        // NAT64: the well-known prefix (64:ff9b::/96) reaches the IPv4 address it embeds, so
        // that address decides; the local-use 64:ff9b:1::/48 is private.
        || (s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4] && embedded(s[6], s[7]))
        || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1)
        || (s[0] == 0x100 && s[1..4] == [0; 3])
        // 6to4 of a blocked IPv4 address.
        || (s[0] == 0x2002 && embedded(s[1], s[2]))
        || (s[0] == 0x2001 && s[1] == 0x0db8)
        || (s[0] & 0xfe00) == 0xfc00
        || (s[0] & 0xffc0) == 0xfe80
        || (s[0] & 0xffc0) == 0xfec0
        || (s[0] & 0xff00) == 0xff00
}

fn blocked(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_blocked(v4),
        IpAddr::V6(v6) => v6_blocked(v6),
    }
}

fuzz_target!(|data: &[u8]| {
    match data.len() {
        4 => {
            let ip = IpAddr::from(<[u8; 4]>::try_from(data).expect("four bytes"));
            if classify(ip).is_ok() {
                assert!(!blocked(ip), "{ip} classified public");
            }
        }
        16 => {
            let ip = IpAddr::from(<[u8; 16]>::try_from(data).expect("sixteen bytes"));
            if classify(ip).is_ok() {
                assert!(!blocked(ip), "{ip} classified public");
            }
        }
        _ => {
            let Ok(text) = std::str::from_utf8(data) else {
                return;
            };
            let Ok(url) = url::Url::parse(text) else {
                return;
            };
            if check_url(&url, &NetPolicy::default()).is_ok() {
                let ip = match url.host() {
                    Some(url::Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
                    Some(url::Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
                    _ => None,
                };
                if let Some(ip) = ip {
                    assert!(!blocked(ip), "{url} let through to {ip}");
                }
            }
        }
    }
});
