//! One normal form for host names, used wherever hosts are compared (server allowlists, the
//! SSRF layer's allowlist, the service's Host and Origin checks): lowercase, IDNA to ASCII,
//! IPv4 and IPv6 spelled as URLs spell them, and one trailing dot (a fully qualified name)
//! removed, so `API.EXAMPLE.COM.` and `api.example.com` are one host.

use url::Host;

/// `text` (a host name or an IP address, IPv6 with or without brackets) in its normal
/// form; `None` when it is not a host.
pub fn normal_host(text: &str) -> Option<String> {
    let text = text.trim();
    let text = text.strip_suffix('.').unwrap_or(text);
    if text.is_empty() || text.ends_with('.') {
        return None;
    }
    let host = Host::parse(text)
        .or_else(|_| Host::parse(&format!("[{text}]")))
        .ok()?;
    Some(match host {
        Host::Domain(name) => name.to_ascii_lowercase(),
        Host::Ipv4(ip) => ip.to_string(),
        Host::Ipv6(ip) => format!("[{ip}]"),
    })
}

#[cfg(test)]
mod tests {
    use super::normal_host;

    #[test]
    fn one_host_has_one_form() {
        for same in ["api.example.com", "API.EXAMPLE.COM.", " Api.Example.Com "] {
            assert_eq!(
                normal_host(same).as_deref(),
                Some("api.example.com"),
                "{same}"
            );
        }
        assert_eq!(
            normal_host("BÜCHER.example").as_deref(),
            Some("xn--bcher-kva.example")
        );
        assert_eq!(normal_host("0x7f.1").as_deref(), Some("127.0.0.1"));
        assert_eq!(normal_host("::1").as_deref(), Some("[::1]"));
        assert_eq!(normal_host("[0:0::1]").as_deref(), Some("[::1]"));
        for bad in ["", ".", "a..", "exa mple.com", "[::1"] {
            assert_eq!(normal_host(bad), None, "{bad}");
        }
    }
}
