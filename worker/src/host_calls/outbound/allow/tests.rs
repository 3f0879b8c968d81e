//! The `--allow-outbound` grammar, rule matching and the special-use
//! address classifier.

use super::*;

fn ip(text: &str) -> IpAddr {
    text.parse().expect(text)
}

fn refused(rule: &str) -> String {
    AllowList::parse(&[rule]).expect_err(rule)
}

#[test]
fn rules_match_hosts_ports_and_wildcards() {
    let list = AllowList::parse(&[
        "api.example.com",
        "*.svc.test:8443",
        "127.0.0.1:9000",
        "[::1]:81",
        "[2001:db8::1]",
        "Mixed.Case.Test",
    ])
    .expect("valid");
    assert!(list.allows("api.example.com", 443, 443));
    assert!(list.allows("api.example.com", 80, 80));
    assert!(list.allows("api.example.com.", 443, 443));
    assert!(!list.allows("api.example.com", 8080, 80));
    assert!(!list.allows("x.api.example.com", 443, 443));
    assert!(list.allows("a.svc.test", 8443, 443));
    assert!(list.allows("a.b.svc.test", 8443, 443));
    assert!(!list.allows("svc.test", 8443, 443));
    assert!(!list.allows("evilsvc.test", 8443, 443));
    assert!(!list.allows("a.svc.test", 443, 443));
    assert!(list.allows("127.0.0.1", 9000, 80));
    assert!(!list.allows("127.0.0.1", 9001, 80));
    assert!(list.allows("::1", 81, 80));
    assert!(list.allows("0:0::1", 81, 80), "IPs compare as addresses");
    assert!(list.allows("2001:db8::1", 443, 443));
    assert!(list.allows("mixed.case.test", 80, 80));
    assert!(!list.allows("::ffff:127.0.0.1", 9000, 80));
    assert!(AllowList::default().is_empty());
    assert!(!list.is_empty());
}

#[test]
fn public_allows_every_host_on_its_ports() {
    let list = AllowList::parse(&["public"]).expect("public");
    assert!(list.allows("example.com", 443, 443));
    assert!(list.allows("93.184.215.14", 80, 80));
    assert!(
        list.allows("localhost", 80, 80),
        "names pass; addresses are checked"
    );
    assert!(!list.allows("example.com", 8443, 443));
    let list = AllowList::parse(&["public:8443", "PUBLIC"]).expect("public:PORT");
    assert!(list.allows("example.com", 8443, 443));
    assert!(list.allows("example.com", 443, 443));
    assert!(!list.allows("example.com", 8080, 80));
}

#[test]
fn allow_list_values_are_parsed_strictly() {
    for (bad, why) in [
        ("::1", "[::1]"),
        ("fe80::1:443", "in brackets"),
        ("127.0.0.1:0", "port 0"),
        ("host:65536", "over 65535"),
        ("host:99999999999", "over 65535"),
        ("host:http", "not a number"),
        ("host:", "no port"),
        (":80", "no host"),
        ("", "empty"),
        ("a..b", "empty label"),
        (".example.com", "empty label"),
        ("example.com.", "empty label"),
        ("-a.example.com", "'-'"),
        ("a-.example.com", "'-'"),
        ("a b", "' '"),
        ("a_b.example", "'_'"),
        ("bücher.example", "xn--"),
        ("http://127.0.0.1", "without a scheme"),
        ("https://api.example.com:443/", "without a scheme"),
        ("api.example.com/v1", "a path"),
        ("api.example.com?x", "a path"),
        ("user@api.example.com", "user info"),
        ("[::1]x", "after ']'"),
        ("[::1", "unclosed"),
        ("[example.com]:80", "not an IPv6 address"),
        ("*", "public"),
        ("*:443", "public"),
        ("*.*.x", "first label"),
        ("a.*.x", "first label"),
        ("*.", "no host"),
        ("256.1.1.1", "IPv4"),
        ("127.1", "IPv4"),
        ("1.2.3.4.5", "IPv4"),
        (&"a".repeat(64), "63"),
    ] {
        let message = refused(bad);
        assert!(
            message.starts_with(&format!("--allow-outbound {bad:?}: ")),
            "{bad}: {message}"
        );
        assert!(message.contains(why), "{bad}: {message}");
    }
    assert!(
        AllowList::parse(&[
            "[::1]",
            "[::1]:8080",
            "a.b",
            "*.a.b:1",
            "x-1.example:65535",
            "localhost",
            "10.0.0.1",
            " padded.example ",
        ])
        .is_ok()
    );
}

#[test]
fn special_addresses_are_classified() {
    for (address, class) in [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "this network"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("100.127.255.255", "carrier-grade NAT"),
        ("169.254.169.254", "link-local"),
        ("192.0.0.8", "IETF"),
        ("192.0.2.1", "documentation"),
        ("198.51.100.7", "documentation"),
        ("203.0.113.9", "documentation"),
        ("198.18.0.1", "benchmarking"),
        ("198.19.255.255", "benchmarking"),
        ("192.88.99.1", "6to4 relay"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        (
            "::ffff:127.0.0.1",
            "IPv4-mapped address of 127.0.0.1, a loopback",
        ),
        (
            "::ffff:10.0.0.1",
            "IPv4-mapped address of 10.0.0.1, a private",
        ),
        (
            "::127.0.0.1",
            "IPv4-compatible address of 127.0.0.1, a loopback",
        ),
        ("::8.8.8.8", "IPv4-compatible"),
        ("64:ff9b::7f00:1", "NAT64 address of 127.0.0.1"),
        ("64:ff9b:1::1", "local-use NAT64"),
        ("2002:7f00:1::", "6to4 address of 127.0.0.1"),
        ("2002:c0a8:101::1", "6to4 address of 192.168.1.1"),
        ("fc00::1", "unique-local"),
        ("fd12:3456::1", "unique-local"),
        ("fe80::1", "link-local"),
        ("febf::1", "link-local"),
        ("fec0::1", "site-local"),
        ("ff02::1", "multicast"),
        ("2001:db8::1", "documentation"),
        ("3fff::1", "documentation"),
        ("2001::1", "Teredo"),
        ("2001:100::1", "IETF"),
        ("100::1", "discard"),
        ("4000::1", "reserved"),
        ("::2", "IPv4-compatible address of 0.0.0.2"),
    ] {
        let found = special_use(ip(address)).unwrap_or_else(|| panic!("{address} is special"));
        assert!(found.contains(class), "{address}: {found}");
    }
    for public in [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.215.14",
        "100.63.255.255",
        "100.128.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "169.253.255.255",
        "192.0.3.1",
        "192.169.0.1",
        "198.17.255.255",
        "198.20.0.0",
        "223.255.255.255",
        "2606:4700:4700::1111",
        "2a00:1450:4001::200e",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
        "2001:200::1",
    ] {
        assert_eq!(special_use(ip(public)), None, "{public} is public");
    }
}

#[test]
fn a_special_address_needs_a_rule_naming_it() {
    let list =
        AllowList::parse(&["vm:8080", "127.0.0.1:9000", "public", "[::1]:81"]).expect("valid");
    let loopback = ip("127.0.0.1");
    let refusal = list
        .check_address("vm", loopback, 8080, 80)
        .expect_err("vm resolves to loopback");
    assert_eq!(
        refusal,
        "vm resolves to 127.0.0.1, a loopback address; only a rule naming that IP allows it \
         (--allow-outbound 127.0.0.1:8080)"
    );
    assert_eq!(list.check_address("vm", loopback, 9000, 80), Ok(()));
    assert_eq!(list.check_address("127.0.0.1", loopback, 9000, 80), Ok(()));
    let refusal = list
        .check_address("127.0.0.1", loopback, 80, 80)
        .expect_err("public reaches no loopback");
    assert!(
        refusal.starts_with("127.0.0.1 is a loopback address;"),
        "{refusal}"
    );
    let refusal = list
        .check_address("internal.example", ip("::1"), 80, 80)
        .expect_err("::1 on port 80 is not named");
    assert!(refusal.contains("(--allow-outbound [::1]:80)"), "{refusal}");
    assert_eq!(list.check_address("x", ip("::1"), 81, 80), Ok(()));
    assert_eq!(
        list.check_address("example.com", ip("8.8.8.8"), 80, 80),
        Ok(())
    );
    let refusal = list
        .check_address("mapped.example", ip("::ffff:192.168.0.1"), 80, 80)
        .expect_err("mapped private");
    assert!(
        refusal.contains("192.168.0.1, a private address"),
        "{refusal}"
    );
}
