//! What a real server says between answers reaches the application: npm's server-everything
//! (stdio) reports a long call's progress, sends log messages, and says when a subscribed
//! resource changed — also after the server was restarted, since the bridge subscribes again.
//! Fails, never skips, when server-everything is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::time::Duration;

use serde_json::json;
use tokio::sync::broadcast::Receiver;
use toolwright_mcp_bridge::{McpBridge, McpNotice, Subscriber};

async fn everything() -> McpBridge {
    common::init_tracing();
    let bridge = McpBridge::new();
    bridge.register(common::everything("everything")).unwrap();
    bridge.start("everything").await.unwrap();
    bridge
}

/// The next notice `want` accepts, within 10 s (others are passed over).
async fn next_where(
    rx: &mut Receiver<McpNotice>,
    what: &str,
    want: impl Fn(&McpNotice) -> bool,
) -> McpNotice {
    let wait = async {
        loop {
            match rx.recv().await {
                Ok(n) if want(&n) => return n,
                Ok(_) => {}
                Err(e) => panic!("the notice channel failed: {e}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .unwrap_or_else(|_| panic!("no {what} within 10 s"))
}

#[tokio::test]
async fn a_long_calls_progress_reaches_the_application_step_by_step() {
    let bridge = everything().await;
    let mut rx = bridge.notices();
    let out = bridge
        .call(
            "everything__trigger-long-running-operation",
            json!({"duration": 1, "steps": 4}),
        )
        .await
        .unwrap();
    assert!(format!("{out:?}").contains("completed"), "{out:?}");
    let mut steps = Vec::new();
    while steps.len() < 4 {
        let n = next_where(&mut rx, "progress", |n| {
            matches!(n, McpNotice::Progress { .. })
        })
        .await;
        let McpNotice::Progress {
            service,
            tool,
            progress,
            total,
            ..
        } = n
        else {
            unreachable!()
        };
        assert_eq!(service, "everything");
        assert_eq!(tool, "trigger-long-running-operation");
        assert_eq!(total, Some(4.0));
        steps.push(progress);
    }
    // Every step was reported, in order.
    assert_eq!(steps, [1.0, 2.0, 3.0, 4.0]);
    bridge.stop("everything").await.unwrap();
}

#[tokio::test]
async fn a_servers_log_messages_reach_the_application_with_their_level() {
    let bridge = everything().await;
    let mut rx = bridge.notices();
    bridge
        .call("everything__toggle-simulated-logging", json!({}))
        .await
        .unwrap();
    let log = next_where(&mut rx, "log message", |n| {
        matches!(n, McpNotice::Log { .. })
    })
    .await;
    let McpNotice::Log {
        service,
        level,
        text,
        ..
    } = log
    else {
        unreachable!()
    };
    assert_eq!(service, "everything");
    let levels = [
        "debug",
        "info",
        "notice",
        "warning",
        "error",
        "critical",
        "alert",
        "emergency",
    ];
    assert!(levels.contains(&level.as_str()), "{level}");
    assert!(text.to_lowercase().contains("message"), "{text}");
    bridge.stop("everything").await.unwrap();
}

#[tokio::test]
async fn a_subscribed_resource_says_it_changed_and_goes_on_saying_so_after_a_restart() {
    let bridge = everything().await;
    let uri = "demo://resource/static/document/features.md";
    let mut rx = bridge.notices();
    bridge.subscribe("everything", uri).await.unwrap();
    // Subscribing twice is one subscription.
    bridge.subscribe("everything", uri).await.unwrap();
    bridge
        .call("everything__toggle-subscriber-updates", json!({}))
        .await
        .unwrap();
    let updated = next_where(&mut rx, "resource update", |n| {
        matches!(n, McpNotice::ResourceUpdated { .. })
    })
    .await;
    assert_eq!(
        updated,
        McpNotice::ResourceUpdated {
            service: "everything".into(),
            uri: uri.into()
        }
    );

    // A restarted server knows no subscriptions; the bridge makes them again (the server logs
    // each subscribe request it gets).
    bridge.restart("everything").await.unwrap();
    next_where(&mut rx, "the server's log of the renewed subscription", |n| {
        matches!(n, McpNotice::Log { text, .. } if text.contains("Subscribe") && text.contains(uri))
    })
    .await;
    bridge
        .call("everything__toggle-subscriber-updates", json!({}))
        .await
        .unwrap();
    next_where(
        &mut rx,
        "resource update after the restart",
        |n| matches!(n, McpNotice::ResourceUpdated { uri: u, .. } if u == uri),
    )
    .await;

    // Unsubscribed, the server is told, and nothing more is passed on for that resource.
    bridge.unsubscribe("everything", uri).await.unwrap();
    next_where(
        &mut rx,
        "the server's log of the unsubscribe",
        |n| matches!(n, McpNotice::Log { text, .. } if text.contains("Unsubscribe")),
    )
    .await;
    bridge.stop("everything").await.unwrap();
}

#[tokio::test]
async fn subscriptions_are_bounded_per_service() {
    let bridge = everything().await;
    for i in 0..toolwright_mcp_bridge::MAX_SUBSCRIPTIONS {
        bridge
            .subscribe("everything", &format!("demo://resource/dynamic/text/{i}"))
            .await
            .unwrap();
    }
    let err = bridge
        .subscribe("everything", "demo://resource/dynamic/text/one-too-many")
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("unsubscribe from one first"),
        "{err}"
    );
    // Making room lets the next one in.
    bridge
        .unsubscribe("everything", "demo://resource/dynamic/text/0")
        .await
        .unwrap();
    bridge
        .subscribe("everything", "demo://resource/dynamic/text/one-too-many")
        .await
        .unwrap();
    bridge.stop("everything").await.unwrap();
}

#[tokio::test]
async fn a_persons_watch_makes_the_server_send_updates_and_their_unwatch_leaves_the_applications() {
    let bridge = everything().await;
    let uri = "demo://resource/static/document/architecture.md";
    let ann = Subscriber::Person("ann".into());
    let mut rx = bridge.notices();
    bridge.subscribe_as(&ann, "everything", uri).await.unwrap();
    next_where(&mut rx, "the server's log of the person's subscribe", |n| {
        matches!(n, McpNotice::Log { text, .. } if text.contains("Subscribe") && text.contains(uri))
    })
    .await;
    bridge
        .call("everything__toggle-subscriber-updates", json!({}))
        .await
        .unwrap();
    next_where(
        &mut rx,
        "resource update for the person",
        |n| matches!(n, McpNotice::ResourceUpdated { uri: u, .. } if u == uri),
    )
    .await;
    assert_eq!(
        bridge.subscriptions_of(&ann),
        vec![("everything".to_owned(), uri.to_owned())]
    );

    // The application holds the same resource; the person stops watching.
    bridge.subscribe("everything", uri).await.unwrap();
    bridge
        .unsubscribe_as(&ann, "everything", uri)
        .await
        .unwrap();
    assert!(bridge.subscriptions_of(&ann).is_empty());
    assert_eq!(
        bridge.subscriptions_of(&Subscriber::Application),
        vec![("everything".to_owned(), uri.to_owned())]
    );
    // The server was not told to unsubscribe: it goes on sending updates (every 5 s), and no
    // unsubscribe shows in its log before the next one.
    let seen = next_where(&mut rx, "an update after the person's unwatch", |n| {
        matches!(n, McpNotice::ResourceUpdated { uri: u, .. } if u == uri)
            || matches!(n, McpNotice::Log { text, .. } if text.contains("Unsubscribe"))
    })
    .await;
    assert!(
        matches!(seen, McpNotice::ResourceUpdated { .. }),
        "the person's unwatch ended the application's subscription: {seen:?}"
    );

    // The application, the last holder, lets go: now the server is told.
    bridge.unsubscribe("everything", uri).await.unwrap();
    next_where(
        &mut rx,
        "the server's log of the last holder's unsubscribe",
        |n| matches!(n, McpNotice::Log { text, .. } if text.contains("Unsubscribe") && text.contains(uri)),
    )
    .await;
    bridge.stop("everything").await.unwrap();
}
