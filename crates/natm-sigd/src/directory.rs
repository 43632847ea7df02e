//! The directory: which ATM addresses are this host's, and which peer sigd serves any
//! other (configured routes, addresses the network handed out by ILMI, and addresses
//! applications register while they run).
//!
//! Addresses compare as digit strings: an AESA as its 40 hex digits, an E.164 number
//! as `+` and its digits. A prefix is written the way the address is (`47.0005.80`,
//! `+4420`), dots ignored; the longest matching prefix wins.

use std::net::SocketAddr;

use natm_proto::wire::addr::AtmAddr;
pub use natm_proto::wire::addr::{key, Prefix};

/// Routes and local addresses.
#[derive(Debug, Default)]
pub struct Directory {
    routes: Vec<(Prefix, SocketAddr)>,
    local: Vec<AtmAddr>,
    /// Addresses the switches took by ILMI (`core::ilmi`).
    learned: Vec<AtmAddr>,
    /// Addresses registered by applications, with the IPC connection that holds them.
    registered: Vec<(AtmAddr, u64)>,
}

/// Where a called address lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// On this host.
    Local,
    /// Behind the peer sigd at this signalling endpoint.
    Peer(SocketAddr),
}

impl Directory {
    /// A directory of configured routes and local addresses.
    pub fn new(routes: Vec<(Prefix, SocketAddr)>, local: Vec<AtmAddr>) -> Directory {
        Directory {
            routes,
            local,
            learned: Vec::new(),
            registered: Vec::new(),
        }
    }

    /// Where `a` is: local if it is ours (configured or registered), else the longest
    /// matching route.
    pub fn route(&self, a: &AtmAddr) -> Option<Route> {
        if self.is_local(a) {
            return Some(Route::Local);
        }
        self.routes
            .iter()
            .filter(|(p, _)| p.matches(a))
            .max_by_key(|(p, _)| p.len())
            .map(|(_, peer)| Route::Peer(*peer))
    }

    /// Whether `a` is one of this host's addresses.
    pub fn is_local(&self, a: &AtmAddr) -> bool {
        self.local.contains(a)
            || self.learned.contains(a)
            || self.registered.iter().any(|(r, _)| r == a)
    }

    /// An address a switch took by ILMI: this host's from now on.
    pub fn learn(&mut self, a: AtmAddr) {
        if !self.learned.contains(&a) {
            self.learned.push(a);
        }
    }

    /// An address a switch no longer has.
    pub fn unlearn(&mut self, a: &AtmAddr) {
        self.learned.retain(|l| l != a);
    }

    /// This host's first address (what a caller is shown as), if any.
    pub fn primary(&self) -> Option<&AtmAddr> {
        self.local
            .first()
            .or(self.learned.first())
            .or(self.registered.first().map(|(a, _)| a))
    }

    /// Register `a` for the IPC connection `owner` until it closes.
    pub fn register(&mut self, a: AtmAddr, owner: u64) {
        if !self.is_local(&a) {
            self.registered.push((a, owner));
        }
    }

    /// The connection that registered `a`, if one did.
    pub fn registered_by(&self, a: &AtmAddr) -> Option<u64> {
        self.registered
            .iter()
            .find(|(r, _)| r == a)
            .map(|(_, o)| *o)
    }

    /// How many addresses `owner` registered.
    pub fn registered_count(&self, owner: u64) -> usize {
        self.registered.iter().filter(|(_, o)| *o == owner).count()
    }

    /// Forget what `owner` registered.
    pub fn unregister_owner(&mut self, owner: u64) {
        self.registered.retain(|(_, o)| *o != owner);
    }

    /// Configured local addresses, learned ones and registered ones.
    pub fn local_addresses(&self) -> Vec<AtmAddr> {
        let mut v = self.local.clone();
        v.extend(self.learned.iter().copied());
        v.extend(self.registered.iter().map(|(a, _)| *a));
        v
    }

    /// The routes.
    pub fn routes(&self) -> &[(Prefix, SocketAddr)] {
        &self.routes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use natm_proto::wire::addr::HostsFile;

    #[test]
    fn longest_prefix_wins_and_local_comes_first() {
        let h = HostsFile::default();
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let us: AtmAddr = "+4420".parse().unwrap();
        let d = Directory::new(
            vec![
                (Prefix::parse("*", &h).unwrap(), a),
                (Prefix::parse("47.0005", &h).unwrap(), b),
            ],
            vec![us],
        );
        let nsap: AtmAddr = "47.0005.80ffe1000000f21a26d8.0020ea000ee0.00"
            .parse()
            .unwrap();
        assert_eq!(d.route(&nsap), Some(Route::Peer(b)));
        assert_eq!(d.route(&"+1555".parse().unwrap()), Some(Route::Peer(a)));
        assert_eq!(d.route(&us), Some(Route::Local));
        assert!(Prefix::parse("zz", &h).is_err());
    }
}
