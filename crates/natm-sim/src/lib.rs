//! A seeded discrete-event network simulator for sans-IO endpoints.
//!
//! The `mem` adaptor's virtual-time network (DESIGN §2): hosts run any [`Endpoint`]
//! (the transport's per-VC state machines in [`psb_host`], whole natm endpoints with
//! their handshake and duplex connections in [`endpoint_host`], or the small ones in
//! [`testing`]); links
//! have a rate that may change over time, a propagation delay, a bounded queue served
//! FIFO or round robin per VC, and a wire that loses (independently or in
//! Gilbert–Elliott bursts), duplicates and corrupts frames. Every frame carries an
//! AAL5 CRC-32 on the simulated wire and is checked at the end of each link, so a
//! corrupted frame is dropped by arithmetic and never delivered.
//!
//! Nothing here reads a clock, does I/O or spawns a thread; the same seed gives the
//! same run, bit for bit. The design follows s2n-quic's simulator and quinn-proto's
//! test `Pair`: `step` to the next event, `run_until` a time, `run_while` a condition.
//!
//! ```
//! use std::time::Duration;
//! use natm_sim::{testing::{Blaster, Sink, TestHost}, LinkConfig, QueueLimit, Sim, VcId};
//! use natm_proto::time::Instant;
//!
//! let ms = Duration::from_millis;
//! let mut sim: Sim<TestHost> = Sim::new(7);
//! let tx = sim.add_host(Blaster::new(VcId(5), 100, 4096).into());
//! let rx = sim.add_host(Sink::new().with_acks(40).into());
//! let access = sim.add_link(LinkConfig::new(100_000_000, ms(0)).name("access"))?;
//! let bottleneck = sim.add_link(
//!     LinkConfig::new(10_000_000, ms(5))
//!         .name("bottleneck")
//!         .queue_limit(QueueLimit::frames(32))
//!         .loss(0.01),
//! )?;
//! let back = sim.add_link(LinkConfig::new(10_000_000, ms(5)).name("back"))?;
//! sim.add_duplex_route(tx, VcId(5), rx, &[access, bottleneck], &[back])?;
//!
//! sim.run_until(Instant::ZERO + Duration::from_secs(1));
//! let sink = sim.host(rx).as_sink().unwrap();
//! let bn = sim.link(bottleneck).stats();
//! // The sender is limited only by its access link, so the bottleneck queue overflows.
//! assert!(bn.dropped_queue_full > 0 && bn.max_queue_frames == 32);
//! assert_eq!(sink.frames() + bn.dropped_queue_full + bn.dropped_random, 100);
//! assert_eq!(sim.host(tx).as_blaster().unwrap().received(), sink.frames());
//! # Ok::<(), natm_sim::SimError>(())
//! ```

mod endpoint;
pub mod endpoint_host;
mod error;
mod event;
mod frame;
mod link;
mod loss;
pub mod network;
mod observe;
pub mod psb_host;
mod queue;
mod ready;
pub mod scenario;
mod simulator;
mod stats;
pub mod testing;
mod timers;
mod topology;

pub use endpoint::{Endpoint, VcId};
pub use error::SimError;
pub use frame::FrameOverhead;
pub use link::{Link, LinkConfig};
pub use loss::{GilbertElliott, Impairments};
pub use observe::{LinkSample, LinkTrace, VcSample};
pub use queue::{Discipline, QueueLimit};
pub use simulator::Sim;
pub use stats::{HostStats, LinkStats, VcStats};
pub use topology::{HostConfig, HostId, LinkId};
