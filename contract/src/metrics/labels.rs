//! The label sets of the metrics' families.

use prometheus_client::encoding::EncodeLabelSet;

/// Labels `{template, status}` of `stasis_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Template name of the actor that answered.
    pub template: String,
    /// HTTP status code answered.
    pub status: u16,
}

/// Labels `{actor, status}` of `stasis_actor_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActorRequestLabels {
    /// Actor name.
    pub actor: String,
    /// HTTP status code answered.
    pub status: u16,
}

/// Label `{worker}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkerLabel {
    /// Worker name.
    pub worker: String,
}

/// Label `{actor}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActorLabel {
    /// Actor name.
    pub actor: String,
}

/// Label `{state}` of `stasis_actors`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// Lower-case actor state.
    pub state: String,
}
