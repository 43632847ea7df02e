//! The shape of the mesh of `natm-lab perf mesh`, before anything exists: which
//! switches a trunk joins, which switch each host hangs off, and every name and
//! address the namespaces, interfaces and configurations use. Pure data.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddrV4};

/// UDP port of every switch port (each on its own veth address).
pub(super) const SWITCH_UDP: u16 = 7000;
/// UDP port of every host's sigd signalling socket.
pub(super) const SIGD_UDP: u16 = 7100;

/// A trunk: two switches, by index, the lower first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Trunk {
    pub(super) a: usize,
    pub(super) b: usize,
}

/// Switches in a ring, with chords to the switch opposite, and hosts spread round it.
#[derive(Debug, Clone)]
pub(super) struct Mesh {
    pub(super) switches: usize,
    pub(super) trunks: Vec<Trunk>,
    /// The switch each host hangs off, by host index.
    pub(super) host_switch: Vec<usize>,
}

impl Mesh {
    /// A ring of `switches` plus a chord from each switch to the one opposite, so
    /// that every switch has at least three trunks and every pair of switches has
    /// paths that share no trunk; `hosts` spread evenly round the ring.
    pub(super) fn new(switches: usize, hosts: usize) -> anyhow::Result<Mesh> {
        anyhow::ensure!(
            (4..=200).contains(&switches),
            "--switches must be 4 to 200 (a ring with chords)"
        );
        anyhow::ensure!(
            (2..=switches).contains(&hosts),
            "--hosts must be 2 to the number of switches"
        );
        let mut set = BTreeSet::new();
        for i in 0..switches {
            for j in [(i + 1) % switches, (i + switches / 2) % switches] {
                if i != j {
                    set.insert(Trunk {
                        a: i.min(j),
                        b: i.max(j),
                    });
                }
            }
        }
        Ok(Mesh {
            switches,
            trunks: set.into_iter().collect(),
            host_switch: (0..hosts).map(|k| k * switches / hosts).collect(),
        })
    }

    /// The trunks of switch `s`: (trunk index, the switch at the other end).
    pub(super) fn trunks_of(&self, s: usize) -> Vec<(usize, usize)> {
        self.trunks
            .iter()
            .enumerate()
            .filter_map(|(t, k)| {
                (k.a == s)
                    .then_some((t, k.b))
                    .or((k.b == s).then_some((t, k.a)))
            })
            .collect()
    }

    /// The hosts of switch `s`, by index.
    pub(super) fn hosts_of(&self, s: usize) -> Vec<usize> {
        (0..self.host_switch.len())
            .filter(|k| self.host_switch[*k] == s)
            .collect()
    }
}

/// Switch `s`'s routing node number.
pub(super) fn node(s: usize) -> u32 {
    s as u32 + 1
}

/// Host `k`'s ATM address (E.164).
pub(super) fn address(k: usize) -> String {
    format!("+4433{k:03}")
}

/// The interface (and switch port) of switch `s` towards switch `other`.
pub(super) fn trunk_if(other: usize) -> String {
    format!("t{other}")
}

/// The interface (and switch port) of a switch towards host `k`.
pub(super) fn host_if(k: usize) -> String {
    format!("h{k}")
}

/// The host's own interface towards its switch.
pub(super) const UPLINK: &str = "up";

/// Trunk `t`'s address at switch `s` (one of its two ends): 10.33.t.1 at the lower
/// switch, .2 at the higher. Each link is its own subnet.
pub(super) fn trunk_ip(mesh: &Mesh, t: usize, s: usize) -> Ipv4Addr {
    let k = mesh.trunks[t];
    let (hi, lo) = ((t >> 8) as u8, t as u8);
    Ipv4Addr::new(10, 33 + hi, lo, if s == k.a { 1 } else { 2 })
}

/// Host `k`'s link: the switch's end (10.40.k.1) and the host's (10.40.k.2).
pub(super) fn host_link_ips(k: usize) -> (Ipv4Addr, Ipv4Addr) {
    let (hi, lo) = ((k >> 8) as u8, k as u8);
    (
        Ipv4Addr::new(10, 40 + hi, lo, 1),
        Ipv4Addr::new(10, 40 + hi, lo, 2),
    )
}

/// Where switch `s`'s port on trunk `t` binds.
pub(super) fn trunk_endpoint(mesh: &Mesh, t: usize, s: usize) -> SocketAddrV4 {
    SocketAddrV4::new(trunk_ip(mesh, t, s), SWITCH_UDP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_switches_have_three_trunks_each_and_hosts_spread() {
        let m = Mesh::new(10, 4).unwrap();
        assert_eq!(m.trunks.len(), 15);
        for s in 0..10 {
            assert_eq!(m.trunks_of(s).len(), 3, "switch {s}");
        }
        assert_eq!(m.host_switch, vec![0, 2, 5, 7]);
        assert_eq!(m.hosts_of(5), vec![2]);
    }

    #[test]
    fn the_two_ends_of_a_trunk_are_one_subnet() {
        let m = Mesh::new(10, 2).unwrap();
        for (t, k) in m.trunks.iter().enumerate() {
            let (a, b) = (trunk_ip(&m, t, k.a), trunk_ip(&m, t, k.b));
            assert_eq!(a.octets()[..3], b.octets()[..3]);
            assert_ne!(a, b);
        }
    }

    #[test]
    fn small_or_odd_meshes_still_give_every_switch_three_trunks() {
        for n in [4, 5, 7, 10, 11] {
            let m = Mesh::new(n, 2).unwrap();
            assert!((0..n).all(|s| m.trunks_of(s).len() >= 3), "{n}");
        }
        assert!(Mesh::new(3, 2).is_err());
        assert!(Mesh::new(10, 11).is_err());
    }
}
