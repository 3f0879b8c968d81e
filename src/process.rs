//! What every long-running `stasis` process shares: logging and the
//! shutdown signals.

/// The crates `stasis_runtime` stands for in `STASIS_LOG` (see
/// [`log_filter`]): the runtime was one crate when that name was
/// documented.
const RUNTIME_CRATES: [&str; 6] = [
    "stasis_contract",
    "stasis_http",
    "stasis_worker",
    "stasis_control",
    "stasis_cluster",
    "stasis_ingress",
];

/// The `tracing` filter `STASIS_LOG` asks for: a directive naming the
/// target `stasis_runtime` (`stasis_runtime=debug`) also applies to each
/// of the [`RUNTIME_CRATES`], so the documented filter still selects every
/// log line of the runtime.
pub(crate) fn log_filter(spec: &str) -> String {
    let mut directives: Vec<String> = Vec::new();
    for directive in spec.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        directives.push(directive.to_owned());
        let Some(rest) = directive.strip_prefix("stasis_runtime") else {
            continue;
        };
        if rest.is_empty() || rest.starts_with('=') || rest.starts_with('[') {
            directives.extend(RUNTIME_CRATES.iter().map(|c| format!("{c}{rest}")));
        }
    }
    directives.join(",")
}

/// Logs to stderr, filtered by `STASIS_LOG` (default `info`, see
/// [`log_filter`]); colours only on a terminal. Guest stdout/stderr lines
/// appear under target `stasis::guest` with the actor's name.
pub(crate) fn init_logging() {
    use std::io::IsTerminal as _;
    let filter = std::env::var("STASIS_LOG")
        .ok()
        .and_then(|spec| tracing_subscriber::EnvFilter::try_new(log_filter(&spec)).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        // A log that cannot be written (a full disk) loses lines; it must
        // never stop the server: the default reports the failure with
        // `eprintln!`, which panics the thread that logged.
        .log_internal_errors(false)
        .init();
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed when this is
/// called, not when the future is first polled: a process announces that
/// it is ready before it waits for the signal, and a SIGTERM sent right
/// after that announcement must be a graceful shutdown, not the default
/// action (exit by signal).
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let interrupt = signal(SignalKind::interrupt());
    async move {
        match (term, interrupt) {
            (Ok(mut term), Ok(mut interrupt)) => tokio::select! {
                _ = interrupt.recv() => tracing::info!("SIGINT received"),
                _ = term.recv() => tracing::info!("SIGTERM received"),
            },
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!("cannot listen for SIGTERM and SIGINT: {e}");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::log_filter;

    #[test]
    fn stasis_runtime_stands_for_every_runtime_crate() {
        assert_eq!(log_filter("warn"), "warn");
        let filter = log_filter("warn,stasis_runtime=debug");
        assert!(filter.starts_with("warn,stasis_runtime=debug,"), "{filter}");
        for krate in super::RUNTIME_CRATES {
            assert!(filter.contains(&format!("{krate}=debug")), "{filter}");
        }
        assert_eq!(log_filter("stasis_runtimes=debug"), "stasis_runtimes=debug");
    }
}
