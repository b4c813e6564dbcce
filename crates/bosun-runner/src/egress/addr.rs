//! Which addresses a sandboxed engine may not reach: every address that is not on the
//! public internet — loopback, private ranges, carrier-grade NAT, link-local (the cloud
//! metadata endpoint among them), unique-local, multicast, unspecified, reserved and
//! documentation ranges — including the IPv6 forms that carry an IPv4 address inside
//! (mapped, compatible, NAT64, 6to4), which are judged by the address they carry.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The cloud metadata address (AWS, GCP, Azure, OpenStack): named on its own in a
/// refusal, since it is the address a hostile module most wants.
pub const METADATA_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);

/// Why `ip` is not a public address, in words a refusal can use ("… is a private
/// address (RFC 1918)"); `None` for a public address.
pub fn not_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_not_public(v4),
        IpAddr::V6(v6) => v6_not_public(v6),
    }
}

fn v4_not_public(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    let reason = if ip == METADATA_V4 {
        "the cloud metadata address"
    } else if a == 0 {
        "an unspecified address (0.0.0.0/8)"
    } else if a == 127 {
        "a loopback address"
    } else if a == 10 || (a == 172 && (16..=31).contains(&b)) || (a == 192 && b == 168) {
        "a private address (RFC 1918)"
    } else if a == 100 && (64..=127).contains(&b) {
        "a carrier-grade NAT address (100.64.0.0/10)"
    } else if a == 169 && b == 254 {
        "a link-local address (169.254.0.0/16)"
    } else if (224..=239).contains(&a) {
        "a multicast address"
    } else if a >= 240 {
        "a reserved or broadcast address (240.0.0.0/4)"
    } else if a == 192 && b == 0 && c == 0 {
        "an IETF protocol address (192.0.0.0/24)"
    } else if (a == 192 && b == 0 && c == 2)
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
    {
        "a documentation address"
    } else if a == 198 && (b == 18 || b == 19) {
        "a benchmarking address (198.18.0.0/15)"
    } else {
        return None;
    };
    Some(reason)
}

fn v6_not_public(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    // The forms with an IPv4 address inside are judged by that address: a NAT64 or 6to4
    // gateway, or the kernel's own mapping, would take the connection there.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_not_public(v4);
    }
    if ip.is_unspecified() {
        return Some("an unspecified address (::)");
    }
    if ip.is_loopback() {
        return Some("a loopback address");
    }
    let reason = if s[..6] == [0; 6] {
        // ::a.b.c.d, the deprecated IPv4-compatible form: never a public destination.
        "an IPv4-compatible IPv6 address (::/96)"
    } else if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        // NAT64 (64:ff9b::/96): what the gateway reaches is the IPv4 address inside.
        return v4_not_public(embedded_v4(s[6], s[7]));
    } else if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        "a local-use NAT64 address (64:ff9b:1::/48)"
    } else if s[0] == 0x2002 {
        // 6to4 (2002::/16) carries the IPv4 address of its relay.
        return v4_not_public(embedded_v4(s[1], s[2]));
    } else if s[0] & 0xfe00 == 0xfc00 {
        "a unique-local address (fc00::/7)"
    } else if s[0] & 0xffc0 == 0xfe80 {
        "a link-local address (fe80::/10)"
    } else if s[0] & 0xffc0 == 0xfec0 {
        "a site-local address (fec0::/10)"
    } else if s[0] & 0xff00 == 0xff00 {
        "a multicast address"
    } else if s[0] == 0x2001 && s[1] == 0x0db8 {
        "a documentation address (2001:db8::/32)"
    } else if s[..4] == [0x0100, 0, 0, 0] {
        "a discard-only address (100::/64)"
    } else {
        return None;
    };
    Some(reason)
}

fn embedded_v4(high: u16, low: u16) -> Ipv4Addr {
    let [a, b] = high.to_be_bytes();
    let [c, d] = low.to_be_bytes();
    Ipv4Addr::new(a, b, c, d)
}

/// An address range an operator allows (`--egress-allow 10.20.0.0/16`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// `addr/prefix`, or a single address (`/32`, `/128`). The address must be the
    /// range's first (`10.0.0.1/8` is refused: it most likely means something else).
    pub fn parse(raw: &str) -> Result<Self, String> {
        let (addr, prefix) = match raw.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (raw, None),
        };
        let network: IpAddr = addr
            .parse()
            .map_err(|_| format!("{raw:?} is not an address or an address range"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{raw:?}: the prefix length must be 0 to {max}"))?,
        };
        let cidr = Cidr { network, prefix };
        if !cidr.contains(network) || cidr.masked(network) != network {
            return Err(format!(
                "{raw:?}: {network} is not the first address of a /{prefix}"
            ));
        }
        Ok(cidr)
    }

    fn masked(&self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(v4) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
            }
            IpAddr::V6(v6) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
        }
    }

    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as its IPv4
    /// address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        ip.is_ipv4() == self.network.is_ipv4() && self.masked(ip) == self.network
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> Option<&'static str> {
        not_public(s.parse().unwrap())
    }

    #[test]
    fn public_ipv4_addresses_pass() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "140.82.112.3",
            "9.255.255.255",
            "11.0.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.167.255.255",
            "192.169.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "169.253.255.255",
            "169.255.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "223.255.255.255",
            "192.0.1.1",
            "198.17.255.255",
            "198.20.0.0",
            "1.0.0.0",
        ] {
            assert_eq!(v4(ip), None, "{ip} is public");
        }
    }

    #[test]
    fn every_non_public_ipv4_range_is_refused_at_both_ends() {
        let cases = [
            ("0.0.0.0", "unspecified"),
            ("0.255.255.255", "unspecified"),
            ("127.0.0.1", "loopback"),
            ("127.255.255.255", "loopback"),
            ("10.0.0.0", "RFC 1918"),
            ("10.255.255.255", "RFC 1918"),
            ("172.16.0.0", "RFC 1918"),
            ("172.31.255.255", "RFC 1918"),
            ("192.168.0.0", "RFC 1918"),
            ("192.168.255.255", "RFC 1918"),
            ("100.64.0.0", "carrier-grade NAT"),
            ("100.127.255.255", "carrier-grade NAT"),
            ("169.254.0.0", "link-local"),
            ("169.254.255.255", "link-local"),
            ("169.254.169.254", "metadata"),
            ("224.0.0.0", "multicast"),
            ("239.255.255.255", "multicast"),
            ("240.0.0.0", "reserved"),
            ("255.255.255.255", "broadcast"),
            ("192.0.0.0", "IETF"),
            ("192.0.0.255", "IETF"),
            ("192.0.2.1", "documentation"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.255", "documentation"),
            ("198.18.0.0", "benchmarking"),
            ("198.19.255.255", "benchmarking"),
        ];
        for (ip, word) in cases {
            let reason = v4(ip).unwrap_or_else(|| panic!("{ip} must be refused"));
            assert!(reason.contains(word), "{ip}: {reason:?} should say {word}");
        }
    }

    #[test]
    fn ipv6_ranges_and_the_forms_that_carry_ipv4() {
        let refused = [
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.1.2.3", "RFC 1918"),
            ("::ffff:169.254.169.254", "metadata"),
            ("::ffff:100.64.0.1", "carrier-grade"),
            ("::127.0.0.1", "IPv4-compatible"),
            ("::8.8.8.8", "IPv4-compatible"),
            ("64:ff9b::10.0.0.1", "RFC 1918"),
            ("64:ff9b::a9fe:a9fe", "metadata"),
            ("64:ff9b:1::1", "NAT64"),
            ("2002:0a00:0001::1", "RFC 1918"),
            ("2002:7f00:0001::", "loopback"),
            ("fc00::", "unique-local"),
            ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "unique-local"),
            ("fd00:ec2::254", "unique-local"),
            ("fe80::1", "link-local"),
            ("febf:ffff::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "multicast"),
            ("2001:db8::1", "documentation"),
            ("100::1", "discard"),
        ];
        for (ip, word) in refused {
            let reason =
                not_public(ip.parse().unwrap()).unwrap_or_else(|| panic!("{ip} must be refused"));
            assert!(reason.contains(word), "{ip}: {reason:?} should say {word}");
        }
        for ip in [
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:0808:0808::1",
            "fbff:ffff::1",
            "fe00::1",
            "2001:db9::1",
            "100:0:0:1::1",
            "1::",
        ] {
            assert_eq!(not_public(ip.parse().unwrap()), None, "{ip} is public");
        }
    }

    #[test]
    fn cidr_ranges_parse_match_and_refuse_what_is_off() {
        let net = Cidr::parse("10.20.0.0/16").unwrap();
        assert!(net.contains("10.20.255.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.20.0.9".parse().unwrap()));
        assert!(!net.contains("10.21.0.0".parse().unwrap()));
        assert!(!net.contains("::1".parse().unwrap()));
        assert_eq!(net.to_string(), "10.20.0.0/16");

        let one = Cidr::parse("127.0.0.1").unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));

        let all = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(all.contains("203.0.113.9".parse().unwrap()));
        let v6 = Cidr::parse("fd00::/8").unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));

        for bad in [
            "10.0.0.1/8",
            "10.0.0.0/33",
            "fd00::/129",
            "host/8",
            "",
            "10.0.0.0/x",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad:?} must be refused");
        }
    }
}
