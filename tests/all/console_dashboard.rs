//! The console as a dashboard (issue 49, item 6) in headless Chromium
//! against the real binary: the server's and an actor's charts of request
//! rate, latency p50/p99 and memory fill in from `/metrics` as requests
//! come; a long last error wraps inside its cell; the actors list filters
//! by label and name prefix and pages through the list API's tokens; the
//! templates view shows every version with its actors and a rollout's
//! progress until it finishes. A screenshot of the dashboard is taken
//! (`STASIS_CONSOLE_SCREENSHOT=PATH` keeps it, e.g. for docs/console.png).

use std::time::Duration;

use serde_json::{Value, json};
use stasis_test_util::admin::call;
use stasis_test_util::wait;

use crate::console::chromium::{Browser, chromium_installed};
use crate::support::{Server, client, to_actor};

/// Creates `name` from `template` with `labels` over the admin API.
async fn create(server: &Server, name: &str, template: &str, labels: &Value) {
    let body = json!({ "name": name, "template": template, "labels": labels });
    let reply = call(&client(), server.admin, "POST", "/v1/actors", Some(&body)).await;
    assert_eq!(reply.status, 201, "{name}: {}", reply.text());
}

/// A JS expression: the last value a chart's line drew (0 before any).
fn last_value(row: &str, line: &str) -> String {
    format!("Number(document.querySelector('#{row} path[data-line={line}]')?.dataset.last || 0)")
}

/// Sends requests to `actor` until every chart of `row` shows a value
/// above zero (rate, p50, p99, memory) and the rate has `points` points:
/// the charts need two polls of `/metrics` with requests between them.
async fn until_charted(
    server: &Server,
    browser: &mut Browser,
    actor: &str,
    row: &str,
    points: u64,
) {
    let drawn = ["rate", "p50", "p99", "memory"]
        .map(|line| format!("{} > 0", last_value(row, line)))
        .join(" && ");
    let drawn = format!(
        "{drawn} && Number(document.querySelector('#{row} path[data-line=rate]').dataset.points) >= {points}"
    );
    wait::until_else_async(
        &format!("the charts of {row}"),
        Duration::from_secs(40),
        async || {
            for _ in 0..3 {
                let answer = to_actor(&client(), server.ingress, actor, "POST", "/").await;
                assert_eq!(answer.status, 200);
            }
            if browser
                .eval(&format!(
                    "(() => {{ try {{ return {drawn}; }} catch (_) {{ return false; }} }})()"
                ))
                .await
                == Value::Bool(true)
            {
                return Ok(());
            }
            Err(browser
                .eval(&format!("document.getElementById('{row}')?.innerText"))
                .await)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_charts_rate_latency_and_memory() {
    if !chromium_installed() {
        return;
    }
    let server = Server::start(&["--workers", "1", "--metrics-per-actor"]);
    server.push("counter");
    server.push("faulty");
    for (name, tier) in [
        ("cart-1", "gold"),
        ("cart-2", "free"),
        ("chat-room", "gold"),
    ] {
        create(
            &server,
            name,
            "counter",
            &json!({ "tier": tier, "app": "shop" }),
        )
        .await;
    }
    create(&server, "loud", "faulty", &json!({})).await;
    let panicked = to_actor(&client(), server.ingress, "loud", "POST", "/panic").await;
    assert_eq!(panicked.status, 500, "{panicked:?}");
    let mut browser = Browser::open(&format!("http://{}/ui/", server.admin)).await;
    browser
        .until("!!document.querySelector('#server-charts') && !!document.querySelector('tr[data-actor=cart-1]')")
        .await;
    until_charted(&server, &mut browser, "cart-1", "server-charts", 5).await;
    // The figures are shown beside the charts, p50 no more than p99.
    let figures = browser
        .eval("[...document.querySelectorAll('#server-charts .value')].map((v) => v.textContent).join(' | ')")
        .await;
    let figures = figures.as_str().expect("text");
    assert!(
        figures.contains("/s") && figures.contains("p50 ") && figures.contains(" ms"),
        "{figures}"
    );
    assert!(!figures.contains('–'), "every chart has a value: {figures}");
    let p50 = browser.eval(&last_value("server-charts", "p50")).await;
    let p99 = browser.eval(&last_value("server-charts", "p99")).await;
    assert!(p50.as_f64() <= p99.as_f64(), "p50 {p50} p99 {p99}");
    let points = browser
        .eval(
            "Number(document.querySelector('#server-charts path[data-line=rate]').dataset.points)",
        )
        .await;
    assert!(points.as_u64() >= Some(5), "{points}");
    // The labels are shown; the last error (a panic's message) wraps in its
    // cell: the table stays within the window.
    browser
        .until("document.querySelector('tr[data-actor=cart-1] td.labels').textContent.includes('tier=gold')")
        .await;
    browser
        .until("document.querySelector('tr[data-actor=loud] td.error').textContent.length > 40")
        .await;
    let fits = browser
        .eval(
            "(() => { const td = document.querySelector('tr[data-actor=loud] td.error'); \
             const table = document.getElementById('actors'); \
             return [td.scrollWidth <= td.clientWidth + 1, \
                     table.getBoundingClientRect().right <= window.innerWidth + 1, \
                     getComputedStyle(td).whiteSpace]; })()",
        )
        .await;
    assert_eq!(fits, json!([true, true, "normal"]), "the error cell");
    let png = browser.screenshot().await;
    if let Some(path) = std::env::var_os("STASIS_CONSOLE_SCREENSHOT") {
        std::fs::write(path, &png).expect("keep the screenshot");
    }
    // An actor's page: its own charts, from its per-actor series.
    browser.eval("location.hash = '#/actor/chat-room'").await;
    browser
        .until("!!document.querySelector('#actor-charts')")
        .await;
    until_charted(&server, &mut browser, "chat-room", "actor-charts", 1).await;
    browser
        .until("document.querySelector('[data-field=labels]').textContent.includes('app=shop')")
        .await;
}

/// The names in the actors table, as JSON text.
const ROWS: &str = "JSON.stringify([...document.querySelectorAll('#actors tr[data-actor]')].map((r) => r.dataset.actor))";

/// Waits until the actors table shows exactly `names`, in order, and the
/// next button is enabled or not as `more` says.
async fn until_rows(browser: &mut Browser, names: &[String], more: bool) {
    let want = serde_json::to_string(names).expect("json");
    browser
        .until(&format!(
            "{ROWS} === '{want}' && document.getElementById('next').disabled === {}",
            !more
        ))
        .await;
}

fn users(of: impl IntoIterator<Item = usize>) -> Vec<String> {
    of.into_iter().map(|i| format!("user-{i:02}")).collect()
}

/// Chooses `n` actors per page.
async fn page_size(browser: &mut Browser, n: usize) {
    browser
        .eval(&format!(
            "(() => {{ const s = document.getElementById('page-size'); s.value = '{n}'; \
             s.dispatchEvent(new Event('change')); }})()"
        ))
        .await;
}

/// Sets the filters' fields and submits them.
async fn filter(browser: &mut Browser, search: &str, labels: &str) {
    browser
        .eval(&format!(
            "document.getElementById('search').value = '{search}'; \
             document.getElementById('label-filter').value = '{labels}'; \
             document.getElementById('filters').requestSubmit()"
        ))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_actors_list_filters_by_label_and_prefix_in_pages() {
    if !chromium_installed() {
        return;
    }
    let server = Server::start(&["--workers", "1"]);
    server.push("counter");
    for i in 0..30 {
        let tier = if i % 2 == 0 { "gold" } else { "free" };
        create(
            &server,
            &format!("user-{i:02}"),
            "counter",
            &json!({ "tier": tier }),
        )
        .await;
    }
    create(&server, "zeta", "counter", &json!({})).await;
    let mut browser = Browser::open(&format!("http://{}/ui/", server.admin)).await;
    browser
        .until("!!document.getElementById('page-size')")
        .await;
    page_size(&mut browser, 10).await;
    // Pages of 10: forward to the end, and back one.
    until_rows(&mut browser, &users(0..10), true).await;
    for (page, more) in [
        (users(10..20), true),
        (users(20..30), true),
        (vec!["zeta".to_owned()], false),
    ] {
        browser
            .eval("document.getElementById('next').click()")
            .await;
        until_rows(&mut browser, &page, more).await;
    }
    browser
        .eval("document.getElementById('previous').click()")
        .await;
    until_rows(&mut browser, &users(20..30), true).await;
    // A label: the gold half, in pages of 10 and 5.
    filter(&mut browser, "", "tier=gold").await;
    until_rows(&mut browser, &users((0..20).step_by(2)), true).await;
    browser
        .eval("document.getElementById('next').click()")
        .await;
    until_rows(&mut browser, &users((20..30).step_by(2)), false).await;
    let info = browser
        .eval("document.getElementById('page-info').textContent")
        .await;
    assert_eq!(info, "page 2: 5 actors", "{info}");
    // A name prefix: the page starts at it and ends with it.
    filter(&mut browser, "user-1", "").await;
    until_rows(&mut browser, &users(10..20), false).await;
    filter(&mut browser, "user-2", "tier=free").await;
    until_rows(&mut browser, &users((21..30).step_by(2)), false).await;
    filter(&mut browser, "nobody", "").await;
    until_rows(&mut browser, &[], false).await;
    // A label's chip filters by it.
    filter(&mut browser, "", "").await;
    page_size(&mut browser, 50).await;
    until_rows(
        &mut browser,
        &[users(0..30), vec!["zeta".to_owned()]].concat(),
        false,
    )
    .await;
    browser
        .eval("document.querySelector('tr[data-actor=user-03] button.label').click()")
        .await;
    until_rows(&mut browser, &users((1..30).step_by(2)), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_templates_view_shows_versions_and_a_rollouts_progress() {
    if !chromium_installed() {
        return;
    }
    let server = Server::start(&["--workers", "1"]);
    server.push("counter");
    for name in ["t1", "t2", "t3"] {
        server.create(name, "counter");
    }
    let v2 = crate::support::demo("counter-v2");
    server.cli_ok(&["template", "push", "counter", v2.to_str().expect("utf-8")]);
    let mut browser = Browser::open(&format!("http://{}/ui/#/templates", server.admin)).await;
    let version = |v: u32| {
        format!(
            "document.querySelector('tr[data-template=counter] [data-version=\"{v}\"]').textContent"
        )
    };
    browser
        .until(&format!(
            "{} === 'v1: 3 actors' && {} === 'v2: 0 actors'",
            version(1),
            version(2)
        ))
        .await;
    browser
        .until("document.querySelector('tr[data-template=counter] .rollout-cell').textContent.includes('none')")
        .await;
    // A rollout to version 2 from its button, followed until it finishes.
    browser
        .eval(
            "const row = document.querySelector('tr[data-template=counter]'); \
             row.querySelector('.to-version').value = '2'; row.querySelector('.roll-out').click()",
        )
        .await;
    browser
        .until_within(
            "document.querySelector('tr[data-template=counter] [data-rollout]')?.dataset.rollout === 'finished'",
            Duration::from_secs(60),
        )
        .await;
    let figures = browser
        .eval("document.querySelector('tr[data-template=counter] .rollout .figures').textContent")
        .await;
    assert!(
        figures
            .as_str()
            .is_some_and(|f| f.contains("rollout to v2: finished") && f.contains("3/3 upgraded")),
        "{figures}"
    );
    browser
        .until(&format!(
            "{} === 'v1: 0 actors' && {} === 'v2: 3 actors'",
            version(1),
            version(2)
        ))
        .await;
    let got = server.cli_json(&["actor", "get", "t2"]);
    assert_eq!(got["template_version"], 2, "{got}");
}
