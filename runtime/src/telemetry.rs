//! OpenTelemetry traces out of this process (`--otlp-endpoint`): the
//! tracer provider every span of [`stasis_contract::trace`] goes to,
//! exporting over OTLP/HTTP (protobuf) in batches from a thread of its own,
//! through Stasis' HTTP client on this process's runtime (plain HTTP, or
//! HTTPS checked against `STASIS_CA_CERT`'s roots as the CLI's are).
//!
//! Sampling: a trace started here is sampled at `--trace-sample-ratio`
//! (by its trace id); every span under a parent follows the parent's
//! decision, which Stasis made itself (see [`stasis_contract::trace`]).
//! Without the flag nothing is installed and the spans are no-ops.

use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};

/// The longest an export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The installed exporter; dropping it flushes the spans still queued.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Installs the process's tracer provider: spans exported to
    /// `endpoint` (`http(s)://HOST:PORT`, the spans going to its
    /// `/v1/traces`; a URL with a path is used as it is) as service
    /// `service`, traces started here sampled at `sample_ratio` (0..=1).
    /// Call it inside the tokio runtime the exports should run on.
    ///
    /// # Errors
    /// If `endpoint` is not an `http://` or `https://` URL, or the
    /// exporter cannot be built.
    pub fn install(endpoint: &str, sample_ratio: f64, service: &str) -> anyhow::Result<Self> {
        let url: hyper::Uri = endpoint
            .parse()
            .with_context(|| format!("--otlp-endpoint {endpoint:?} is not a URL"))?;
        let (Some(scheme), Some(authority)) = (url.scheme_str(), url.authority()) else {
            anyhow::bail!(
                "--otlp-endpoint {endpoint:?} needs http://HOST:PORT or https://HOST:PORT"
            );
        };
        anyhow::ensure!(
            scheme == "http" || scheme == "https",
            "--otlp-endpoint {endpoint:?}: only http:// and https:// (OTLP over HTTP) are supported"
        );
        let base = format!("{scheme}://{authority}");
        let traces = match url.path() {
            "" | "/" => format!("{base}/v1/traces"),
            path => format!("{base}{path}"),
        };
        let client = stasis_http::client::HttpClient::new(&base, None, Duration::from_secs(5))
            .map_err(|e| anyhow::anyhow!("--otlp-endpoint: {}", e.message()))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(Exporting {
                client,
                runtime: tokio::runtime::Handle::current(),
            })
            .with_endpoint(traces)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .context("building the OTLP exporter")?;
        let ratio = sample_ratio.clamp(0.0, 1.0);
        stasis_contract::trace::set_sample_ratio(ratio);
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                ratio,
            ))))
            .with_resource(
                Resource::builder()
                    .with_service_name(service.to_owned())
                    .build(),
            )
            .build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        Ok(Self { provider })
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("flushing the last spans: {e}");
        }
    }
}

/// The exporter's HTTP client: Stasis' own, its requests run on the
/// process's runtime (the exporter's thread only waits for them).
#[derive(Debug)]
struct Exporting {
    client: stasis_http::client::HttpClient,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for Exporting {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map_or_else(|| "/".to_owned(), ToString::to_string);
        let headers: Vec<(String, String)> = parts
            .headers
            .iter()
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_owned())))
            .collect();
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let headers: Vec<(&str, &str)> = headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            client
                .exchange(parts.method, &path, &headers, body, Some(EXPORT_TIMEOUT))
                .await
        });
        let answer = sent.await?.map_err(|e| format!("sending spans: {e:?}"))?;
        let mut response = Response::builder().status(answer.status);
        for (name, value) in &answer.headers {
            response = response.header(name, value);
        }
        Ok(response.body(answer.body)?)
    }
}
