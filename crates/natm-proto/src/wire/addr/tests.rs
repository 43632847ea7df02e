//! Unit tests: every form, the printing rules, every error kind with its position, and
//! the hosts file.

use super::*;

const ICD: &str = "47.0005.80FFE1000000F21A26D8.0020481A26D8.00";

fn addr(s: &str) -> AtmAddr {
    s.parse()
        .unwrap_or_else(|e: AddrParseError| panic!("{s:?}: {}", e.render(s)))
}

/// Parses, checks the canonical print, and that the print parses back to the same.
fn canonical(s: &str, printed: &str) -> AtmAddr {
    let a = addr(s);
    assert_eq!(a.to_string(), printed, "print of {s:?}");
    assert_eq!(addr(printed), a, "reparse of {printed:?}");
    a
}

fn assert_err(s: &str, kind: AddrErrorKind, pos: usize, token: &str) -> AddrParseError {
    match s.parse::<AtmAddr>() {
        Ok(a) => panic!("{s:?} parsed as {a:?}"),
        Err(e) => {
            assert_eq!(
                (e.kind, e.pos, e.token.as_str()),
                (kind, pos, token),
                "{s:?}: {e}"
            );
            e
        }
    }
}

fn pvc(itf: PvcPart, vpi: PvcPart, vci: PvcPart) -> AtmAddr {
    AtmAddr::Pvc(Pvc::new(itf, vpi, vci).unwrap())
}

#[test]
fn pvc_forms() {
    let a = canonical("0.5", "0.0.5");
    assert_eq!(a, AtmAddr::Pvc(Pvc::exact(0, 0, 5).unwrap()));
    canonical("1.2.3", "1.2.3");
    canonical("32767.255.65535", "32767.255.65535");
    canonical("0.0.0", "0.0.0");
    let p = match addr("3.8.32") {
        AtmAddr::Pvc(p) => p,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (p.itf(), p.vpi(), p.vci()),
        (PvcPart::Num(3), PvcPart::Num(8), PvcPart::Num(32))
    );
    assert!(!p.is_wildcard());
}

#[test]
fn pvc_wildcards() {
    use PvcPart::{Any, Num, Unspec};
    assert_eq!(canonical("*.*", "0.*.*"), pvc(Num(0), Any, Any));
    assert_eq!(canonical("*.0.?", "*.0.?"), pvc(Any, Num(0), Unspec));
    assert_eq!(canonical("0.?.?", "0.?.?"), pvc(Num(0), Unspec, Unspec));
    assert!(addr("0.0.*").is_wildcard());
    assert!(!addr(ICD).is_wildcard());
    assert_eq!(Pvc::new(Unspec, Num(0), Num(5)), None);
    assert_eq!(Pvc::new(Num(0), Num(256), Num(5)), None);
    assert_eq!(Pvc::exact(32_768, 0, 5), None);
}

#[test]
fn aesa_forms_and_printing() {
    let a = canonical(ICD, ICD);
    let AtmAddr::Aesa(aesa) = a else {
        panic!("{a:?}")
    };
    assert_eq!(aesa.afi(), Aesa::AFI_ICD);
    assert_eq!(aesa.esi(), [0x00, 0x20, 0x48, 0x1A, 0x26, 0xD8]);
    assert_eq!(aesa.selector(), 0);
    assert_eq!(aesa.as_bytes()[..3], [0x47, 0x00, 0x05]);
    // Dots anywhere between digits, either case, none at all.
    canonical("470005.80ffe1000000f21a26d8.0020481a26d8.00", ICD);
    canonical("47000580FFE1000000F21A26D80020481A26D800", ICD);
    canonical("4.7.0.0.0.5.80FFE1000000F21A26D80020481A26D800", ICD);
    // DCC and the group formats share the 1.2.10.6.1 layout.
    canonical(
        "39840F800001000000000000000020481A26D801",
        "39.840F.80000100000000000000.0020481A26D8.01",
    );
    canonical(
        "C5000580FFE1000000F21A26D80020481A26D800",
        "C5.0005.80FFE1000000F21A26D8.0020481A26D8.00",
    );
    // Local: 1.12.6.1.
    canonical(
        "49000000000000000000000000.0020481A26D8.00",
        "49.000000000000000000000000.0020481A26D8.00",
    );
    // Any other AFI: 40 bare digits.
    canonical(
        "AA.0005.80FFE1000000F21A26D8.0020481A26D8.00",
        "AA000580FFE1000000F21A26D80020481A26D800",
    );
    assert_eq!(Aesa::new([0; 20]), None);
    assert_eq!(format!("{:?}", aesa), format!("Aesa({ICD})"));
}

#[test]
fn e164_format_aesa() {
    let a = canonical(
        "4122123456:00000000.0020481A26D8.00",
        "4122123456:00000000.0020481A26D8.00",
    );
    let AtmAddr::Aesa(aesa) = a else {
        panic!("{a:?}")
    };
    assert_eq!(aesa.afi(), Aesa::AFI_E164);
    assert_eq!(
        aesa.as_bytes()[..9],
        [0x45, 0x00, 0x00, 0x04, 0x12, 0x21, 0x23, 0x45, 0x6F]
    );
    // The same bytes written out in full print in the colon form.
    let hex: String = aesa.as_bytes().iter().map(|b| format!("{b:02X}")).collect();
    assert_eq!(addr(&hex), a);
    // Not binary-coded decimal, or the group AFI: 40 bare digits.
    canonical(
        "450000041221234A6F000000000020481A26D800",
        "450000041221234A6F000000000020481A26D800",
    );
    canonical(
        "C30000041221234566F00000000020481A26D800",
        "C30000041221234566F00000000020481A26D800",
    );
    // A filler other than F, or no digits at all, cannot use the colon form either.
    canonical(
        "450000041221234560000000000020481A26D800",
        "450000041221234560000000000020481A26D800",
    );
    canonical(
        "45000000000000000F000000000020481A26D800",
        "45000000000000000F000000000020481A26D800",
    );
    canonical("1:0000000000000000000000", "1:00000000.000000000000.00");
    canonical(
        "123456789012345:0000000000000000000000",
        "123456789012345:00000000.000000000000.00",
    );
}

#[test]
fn e164_numbers() {
    let a = canonical("+4122123456", "+4122123456");
    let AtmAddr::E164 { number, subaddress } = a else {
        panic!("{a:?}")
    };
    assert_eq!((number.as_str(), subaddress), ("4122123456", None));
    canonical("+41.22.123.456", "+4122123456");
    canonical("+012345678901234", "+012345678901234");
    let with_sub = canonical(&format!("+4122123456+{ICD}"), &format!("+4122123456+{ICD}"));
    assert!(matches!(
        with_sub,
        AtmAddr::E164 {
            subaddress: Some(_),
            ..
        }
    ));
    assert_eq!(E164::new(""), None);
    assert_eq!(E164::new("1234567890123456"), None);
    assert_eq!(E164::new("12a"), None);
    assert_eq!(E164::new("1").unwrap().to_string(), "+1");
    assert_eq!(format!("{:?}", E164::new("12").unwrap()), "E164(+12)");
}

#[test]
fn surrounding_space_is_ignored() {
    assert_eq!(addr("  0.5\t"), addr("0.5"));
}

// ---- errors, one kind at a time ----

#[test]
fn error_empty() {
    assert_err("", AddrErrorKind::Empty, 0, "");
    assert_err("  ", AddrErrorKind::Empty, 2, "");
}

#[test]
fn error_bad_pvc() {
    assert_err("5", AddrErrorKind::BadPvc, 0, "5");
    assert_err("1.2.3.4", AddrErrorKind::BadPvc, 0, "1.2.3.4");
    assert_err("*", AddrErrorKind::BadPvc, 0, "*");
    assert_err("?.1.2", AddrErrorKind::BadPvc, 0, "?");
    let e = assert_err("12345", AddrErrorKind::BadPvc, 0, "12345");
    assert!(e.detail().contains("E.164 number starts with +"));
}

#[test]
fn error_bad_number() {
    assert_err("0.05", AddrErrorKind::BadNumber, 2, "05");
    assert_err("1*.5", AddrErrorKind::BadNumber, 0, "1*");
    assert_err(
        "0123:0000000000000000000000",
        AddrErrorKind::BadNumber,
        0,
        "0123",
    );
}

#[test]
fn error_out_of_range() {
    let e = assert_err("0.256.5", AddrErrorKind::OutOfRange, 2, "256");
    assert_eq!(
        e.to_string(),
        "number out of range \"256\" at column 3: the vpi is at most 255"
    );
    assert_err("0.0.65536", AddrErrorKind::OutOfRange, 4, "65536");
    assert_err("32768.0.5", AddrErrorKind::OutOfRange, 0, "32768");
    assert_err("0.99999999999", AddrErrorKind::OutOfRange, 2, "99999999999");
}

#[test]
fn error_bad_char() {
    let bad = "47.0005.80FFE1000000F21A26D8.0020481A26D8.0G";
    assert_err(bad, AddrErrorKind::BadChar, 43, "G");
    assert_err("+12a", AddrErrorKind::BadChar, 3, "a");
    assert_err(
        "41.22:0000000000000000000000",
        AddrErrorKind::BadChar,
        2,
        ".",
    );
    assert_err("+1+47x", AddrErrorKind::BadChar, 5, "x");
}

#[test]
fn error_bad_dot() {
    assert_err("0..5", AddrErrorKind::BadDot, 2, ".");
    assert_err(".5", AddrErrorKind::BadDot, 0, ".");
    assert_err("5.", AddrErrorKind::BadDot, 1, ".");
    assert_err("+1..2", AddrErrorKind::BadDot, 3, ".");
    assert_err("+.1", AddrErrorKind::BadDot, 1, ".");
    assert_err(&format!("{ICD}."), AddrErrorKind::BadDot, ICD.len(), ".");
    assert_err("47..0005", AddrErrorKind::BadDot, 3, ".");
    assert_err("47..00AB", AddrErrorKind::BadDot, 3, ".");
    assert_err("1:.0000000000000000000000", AddrErrorKind::BadDot, 2, ".");
}

#[test]
fn error_bad_length() {
    assert_err("47.00AB", AddrErrorKind::BadLength, 0, "47.00AB");
    let e = assert_err(
        &format!("{ICD}0"),
        AddrErrorKind::BadLength,
        0,
        &format!("{ICD}0"),
    );
    assert_eq!(e.detail(), "an AESA has 40 hex digits, not 41");
    assert_err("+", AddrErrorKind::BadLength, 1, "");
    assert_err("++1", AddrErrorKind::BadLength, 1, "+");
    assert_err(
        "+1234567890123456",
        AddrErrorKind::BadLength,
        1,
        "1234567890123456",
    );
    assert_err(":0000000000000000000000", AddrErrorKind::BadLength, 0, ":");
    assert_err("41:00", AddrErrorKind::BadLength, 3, "00");
    assert_err("+1+", AddrErrorKind::BadLength, 3, "");
}

#[test]
fn error_bad_afi() {
    assert_err(
        "00.0005.80FFE1000000F21A26D8.0020481A26D8.00",
        AddrErrorKind::BadAfi,
        0,
        "00",
    );
}

#[test]
fn error_unknown_name() {
    let e = assert_err("switch", AddrErrorKind::UnknownName, 0, "switch");
    assert!(e.detail().contains("names need a hosts file"));
    let hosts = HostsFile::parse("0.0.42 switch\n").unwrap();
    let e = AtmAddr::parse_with_hosts("router", &hosts).unwrap_err();
    assert_eq!((e.kind, e.pos), (AddrErrorKind::UnknownName, 0));
    assert!(e.detail().contains("not a name in the hosts file"));
    assert_err("0.x", AddrErrorKind::UnknownName, 0, "0.x");
}

#[test]
fn caret_rendering() {
    let s = "0.256.5";
    let e = s.parse::<AtmAddr>().unwrap_err();
    assert_eq!(e.caret_line(s), "  ^^^");
    assert_eq!(
        e.render(s),
        "number out of range \"256\" at column 3: the vpi is at most 255\n  0.256.5\n    ^^^"
    );
}

// ---- the hosts file ----

const HOSTS: &str = "\
# natm test hosts
47.0005.80FFE1000000F21A26D8.0020481A26D8.00  lab-a  a.lab   # the first host
0.0.42\tswitch-mgmt

+4122123456 phone
47.0005.80FFE1000000F21A26D8.0020481A26D8.00  lab-a-again
0.1.99 LAB-A
";

#[test]
fn hosts_lookup() {
    let hosts: HostsFile = HOSTS.parse().unwrap();
    assert_eq!(hosts.entries().len(), 5);
    assert_eq!(hosts.entries()[1].line, 3);
    assert_eq!(hosts.entries()[0].names, ["lab-a", "a.lab"]);
    let by_name = |n: &str| AtmAddr::parse_with_hosts(n, &hosts).map(|a| a.to_string());
    assert_eq!(by_name("lab-a").as_deref(), Ok(ICD));
    assert_eq!(
        by_name("LAB-A").as_deref(),
        Ok(ICD),
        "case is ignored; the first line wins"
    );
    assert_eq!(by_name("a.lab").as_deref(), Ok(ICD));
    assert_eq!(by_name("Switch-Mgmt").as_deref(), Ok("0.0.42"));
    assert_eq!(by_name("phone").as_deref(), Ok("+4122123456"));
    // Addresses are never looked up.
    assert_eq!(by_name("0.0.7").as_deref(), Ok("0.0.7"));
    assert_eq!(hosts.name_of(&addr(ICD)), Some("lab-a"));
    assert_eq!(hosts.name_of(&addr("0.0.7")), None);
    assert_eq!(hosts.lookup("nobody"), None);
    assert_eq!(HostsFile::default().entries(), &[]);
}

#[test]
fn hosts_name_that_looks_numeric() {
    // A name made of hex digits fails as an AESA, then resolves as a name.
    let hosts = HostsFile::parse("0.0.42 cafe\n0.0.43 3com\n").unwrap();
    assert_eq!(
        AtmAddr::parse_with_hosts("cafe", &hosts),
        Ok(addr("0.0.42"))
    );
    assert_eq!(
        AtmAddr::parse_with_hosts("3com", &hosts),
        Ok(addr("0.0.43"))
    );
    let e = "cafe".parse::<AtmAddr>().unwrap_err();
    assert_eq!(e.kind, AddrErrorKind::UnknownName);
}

#[test]
fn hosts_errors() {
    let e = HostsFile::parse("0.0.1 ok\n  0.256.1 bad\n").unwrap_err();
    let HostsError::Line {
        line,
        error: HostsLineError::BadAddress(a),
        path: None,
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(
        (*line, a.kind, a.pos, a.column),
        (2, AddrErrorKind::OutOfRange, 4, 5)
    );
    assert_eq!(
        e.to_string(),
        "line 2: number out of range \"256\" at column 5: the vpi is at most 255"
    );
    let e = HostsFile::parse("0.0.1   # no name\n").unwrap_err();
    assert!(matches!(
        e,
        HostsError::Line {
            line: 1,
            error: HostsLineError::NoName { .. },
            ..
        }
    ));
    let e = HostsFile::parse("0.0.1 host 0.0.2\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 1: \"0.0.2\" is an ATM address itself, so it cannot be a name"
    );
    let e = HostsFile::parse("12345 bare-e164\n").unwrap_err();
    assert!(e.to_string().contains("E.164 number starts with +"), "{e}");
}

#[test]
fn hosts_load() {
    let path = std::env::temp_dir().join(format!("natm-hosts-{}.atm", std::process::id()));
    std::fs::write(&path, "0.0.42 switch\nbogus\n").unwrap();
    let e = HostsFile::load(&path).unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("{}:2: ", path.display())),
        "{e}"
    );
    std::fs::write(&path, HOSTS).unwrap();
    assert_eq!(HostsFile::load(&path).unwrap(), HOSTS.parse().unwrap());
    std::fs::remove_file(&path).unwrap();
    let e = HostsFile::load(&path).unwrap_err();
    assert!(matches!(e, HostsError::Io { .. }));
    assert!(std::error::Error::source(&e).is_some());
    assert_eq!(HostsFile::LINUX_PATH, "/etc/hosts.atm");
}
