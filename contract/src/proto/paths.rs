//! The paths of the internal APIs: a worker's ([`WorkerPath`]) and the
//! control plane's ([`ControlPath`]), written and read by one type each.

use super::{Op, PREFIX};

/// A path of the worker API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerPath<'a> {
    /// Every hosted actor.
    Actors,
    /// One actor.
    Actor(&'a str),
    /// An operation on one actor; `Err` holds an unknown operation's name.
    Op(&'a str, Result<Op, &'a str>),
}

impl<'a> WorkerPath<'a> {
    /// The path.
    #[must_use]
    pub fn to_path(self) -> String {
        match self {
            WorkerPath::Actors => format!("{PREFIX}/actors"),
            WorkerPath::Actor(actor) => format!("{PREFIX}/actors/{actor}"),
            WorkerPath::Op(actor, op) => {
                let op: &str = match op {
                    Ok(op) => op.as_str(),
                    Err(name) => name,
                };
                format!("{PREFIX}/actors/{actor}/{op}")
            }
        }
    }

    /// The worker path `path` is, if any.
    #[must_use]
    pub fn parse(path: &'a str) -> Option<Self> {
        let rest = path.strip_prefix(PREFIX)?.strip_prefix("/actors")?;
        if rest.is_empty() {
            return Some(WorkerPath::Actors);
        }
        let segments: Vec<&str> = rest.strip_prefix('/')?.split('/').collect();
        match segments.as_slice() {
            [actor] => Some(WorkerPath::Actor(actor)),
            [actor, op] => Some(WorkerPath::Op(actor, Op::parse(op).ok_or(*op))),
            _ => None,
        }
    }
}

/// A path the control plane serves to remote workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlPath<'a> {
    /// `POST`: a worker joins ([`JoinRequest`] → [`JoinAnswer`]).
    Join,
    /// `POST`: worker `name` is alive.
    Heartbeat(&'a str),
    /// `POST`: drain worker `name` (it is shutting down).
    Drain(&'a str),
    /// `GET`: the module bytes of template `digest`.
    Template(&'a str),
    /// `PUT`: snapshot `seq` (as given) of `actor`, replicated.
    Snapshot(&'a str, &'a str),
    /// `POST`: an actor's `call` to actor `name` (body and answer: the
    /// host-API encoding of the request and the response).
    Call(&'a str),
    /// `POST`: an actor's `send` to actor `name` (body: the encoded
    /// request; answer 202 once accepted).
    Send(&'a str),
    /// `PUT` (body: Unix ms, decimal), `DELETE`, `GET`: the alarm of actor
    /// `name`, set by its actor on a remote worker.
    Alarm(&'a str),
    /// `POST`: an actor's operation on its WebSockets and streams (body: a
    /// `SocketOp`, JSON; answer: the ids of a list, JSON).
    Sockets(&'a str),
    /// `POST`: a follower replica asks the leader to create actor `name`
    /// on first use (answer 204 once it exists; 404 when its namespace
    /// creates no actors on first use).
    OnDemand(&'a str),
    /// `POST`: a follower replica holding a request for actor `name`, which
    /// has no host (placed lazily and not adopted yet, or its worker lost),
    /// asks the leader to place it now (answer 204 once it is placed or
    /// needed no placing).
    Place(&'a str),
}

impl<'a> ControlPath<'a> {
    /// The path.
    #[must_use]
    pub fn to_path(self) -> String {
        match self {
            ControlPath::Join => format!("{PREFIX}/workers/join"),
            ControlPath::Heartbeat(name) => format!("{PREFIX}/workers/{name}/heartbeat"),
            ControlPath::Drain(name) => format!("{PREFIX}/workers/{name}/drain"),
            ControlPath::Template(digest) => format!("{PREFIX}/templates/{digest}"),
            ControlPath::Snapshot(actor, seq) => format!("{PREFIX}/snapshots/{actor}/{seq}"),
            ControlPath::Call(actor) => format!("{PREFIX}/calls/{actor}"),
            ControlPath::Send(actor) => format!("{PREFIX}/sends/{actor}"),
            ControlPath::Alarm(actor) => format!("{PREFIX}/alarms/{actor}"),
            ControlPath::Sockets(actor) => format!("{PREFIX}/sockets/{actor}"),
            ControlPath::OnDemand(actor) => format!("{PREFIX}/on-demand/{actor}"),
            ControlPath::Place(actor) => format!("{PREFIX}/place/{actor}"),
        }
    }

    /// The control-plane path `path` is, if any.
    #[must_use]
    pub fn parse(path: &'a str) -> Option<Self> {
        let rest = path.strip_prefix(PREFIX)?.strip_prefix('/')?;
        let segments: Vec<&str> = rest.split('/').collect();
        match segments.as_slice() {
            ["workers", "join"] => Some(ControlPath::Join),
            ["workers", name, "heartbeat"] => Some(ControlPath::Heartbeat(name)),
            ["workers", name, "drain"] => Some(ControlPath::Drain(name)),
            ["templates", digest] => Some(ControlPath::Template(digest)),
            ["snapshots", actor, seq] => Some(ControlPath::Snapshot(actor, seq)),
            ["calls", actor] => Some(ControlPath::Call(actor)),
            ["sends", actor] => Some(ControlPath::Send(actor)),
            ["alarms", actor] => Some(ControlPath::Alarm(actor)),
            ["sockets", actor] => Some(ControlPath::Sockets(actor)),
            ["on-demand", actor] => Some(ControlPath::OnDemand(actor)),
            ["place", actor] => Some(ControlPath::Place(actor)),
            _ => None,
        }
    }

    /// Whether `path` is under the internal prefix at all.
    #[must_use]
    pub fn is_internal(path: &str) -> bool {
        path == PREFIX || path.starts_with("/internal/")
    }
}
