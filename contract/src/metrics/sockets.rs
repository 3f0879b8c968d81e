//! The metrics of the WebSockets and streams a process holds
//! ([`SocketMetrics`]).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The socket metrics.
#[derive(Debug, Default, Clone)]
pub struct SocketMetrics {
    /// `stasis_sockets_open`: WebSockets and streams this process holds
    /// open for its actors.
    pub open: Gauge,
    /// `stasis_socket_pings_total`: pings sent to WebSockets silent for
    /// `--socket-ping`.
    pub pings: Counter,
    /// `stasis_sockets_dead_total`: WebSockets closed (1006 to the actor)
    /// because they did not answer a ping in time.
    pub dead: Counter,
    /// `stasis_stream_heartbeats_total`: comment lines sent on event
    /// streams silent for `--socket-ping`.
    pub heartbeats: Counter,
}

impl SocketMetrics {
    /// The metrics, registered in `registry`.
    #[must_use]
    pub fn register(registry: &mut Registry) -> Self {
        let this = Self::default();
        registry.register(
            "stasis_sockets_open",
            "WebSockets and streams held open for the actors",
            this.open.clone(),
        );
        registry.register(
            "stasis_socket_pings",
            "Pings sent to WebSockets silent for --socket-ping",
            this.pings.clone(),
        );
        registry.register(
            "stasis_sockets_dead",
            "WebSockets closed because they did not answer a ping within --socket-ping",
            this.dead.clone(),
        );
        registry.register(
            "stasis_stream_heartbeats",
            "Heartbeat comments sent on event streams silent for --socket-ping",
            this.heartbeats.clone(),
        );
        this
    }
}
