//! Fuzzes the request reader of `--metrics` (natm_sigd::metrics::http::route): any
//! octets, whole and cut.
#![no_main]

use libfuzzer_sys::fuzz_target;
use natm_sigd::metrics::http::{route, Route, MAX_REQUEST};

fuzz_target!(|data: &[u8]| {
    let data = &data[..data.len().min(MAX_REQUEST + 64)];
    let whole = route(data);
    if data.len() >= MAX_REQUEST {
        assert_ne!(whole, Route::Incomplete, "a full buffer must be answered");
    }
    match whole {
        Route::Metrics => assert!(data.starts_with(b"GET /metrics"), "{data:?}"),
        Route::Refuse(r) => {
            assert!(r.response().starts_with(b"HTTP/1.1 "));
        }
        Route::Incomplete => {}
    }
    // A request whole in a prefix is answered the same whatever follows it.
    for cut in [data.len() / 3, data.len() / 2, data.len().saturating_sub(1)] {
        let part = route(&data[..cut]);
        let complete = matches!(part, Route::Metrics)
            || matches!(part, Route::Refuse(r) if r.status().0 == 404 || r.status().0 == 405);
        if complete {
            assert_eq!(part, whole, "cut at {cut}");
        }
    }
});
