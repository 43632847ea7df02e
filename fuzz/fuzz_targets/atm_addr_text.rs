//! Fuzzes the ATM address parser and the hosts-file parser: no input panics, an
//! error's token sits at its position, and anything that parses prints to text that
//! parses back to the same address.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_proto::wire::addr::{AtmAddr, HostsFile};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The first line doubles as an address; the whole input as a hosts file.
    let line = text.lines().next().unwrap_or("");
    let hosts = text.parse::<HostsFile>().unwrap_or_default();
    for result in [
        line.parse::<AtmAddr>(),
        AtmAddr::parse_with_hosts(line, &hosts),
    ] {
        match result {
            Err(e) => {
                assert_eq!(
                    line.get(e.pos..e.pos + e.token.len()),
                    Some(e.token.as_str()),
                    "error token not at its position"
                );
                let _ = (e.to_string(), e.render(line));
            }
            Ok(addr) => {
                let printed = addr.to_string();
                let again: AtmAddr = printed.parse().expect("printed address must parse");
                assert_eq!(again, addr, "{line:?} printed as {printed:?}");
                assert_eq!(again.to_string(), printed, "printing is not a fixed point");
            }
        }
    }
});
