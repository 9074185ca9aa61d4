//! the browser login — OIDC authorization code with PKCE — against the test's own OpenID
//! provider on 127.0.0.1 (discovery, JWKS, an authorization endpoint that approves as the
//! person the test chooses, a token endpoint that checks the PKCE verifier), over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;
#[path = "common/oidc.rs"]
mod oidc;

use std::time::{SystemTime, UNIX_EPOCH};

use oidc::{Provider, client, panel_with_login, set_cookie, sign_in, to_the_callback};
use serde_json::{Value, json};

#[tokio::test]
async fn login_code_flow_with_pkce_signs_the_person_in_and_the_cookie_is_theirs() {
    let op = Provider::start().await;
    let fx = panel_with_login(&op).await;
    let base = fx.url();
    let c = client();
    // no session: the page sends the person to /login, the API says where
    let r = c.get(&base).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers()["location"], "/login");
    let r = c.post(format!("{base}api/sessions")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["login"], "/login", "{body}");

    let alice = sign_in(&op, &base, "alice").await;
    // what the provider was asked: S256 PKCE, a state and a nonce, our redirect
    let asked = op.asked.lock().unwrap().clone();
    assert_eq!(asked["code_challenge_method"], "S256");
    assert_eq!(asked["code_challenge"].len(), 43, "{asked:?}");
    assert!(
        asked["state"].len() >= 32 && asked["nonce"].len() >= 32,
        "{asked:?}"
    );
    assert_eq!(asked["redirect_uri"], format!("{base}callback"));
    assert_eq!(asked["scope"], "openid");

    let r = c.get(&base).header("cookie", &alice).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "the page, for alice");
    let r = c
        .post(format!("{base}api/sessions"))
        .header("cookie", &alice)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let id = r.json::<Value>().await.unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    // bob signs in too: alice's conversation is not his
    let bob = sign_in(&op, &base, "bob").await;
    assert_ne!(bob, alice);
    let get = |cookie: String| {
        let c = c.clone();
        let url = format!("{base}api/sessions/{id}");
        async move {
            c.get(url)
                .header("cookie", cookie)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(get(alice.clone()).await, 200);
    assert_eq!(get(bob.clone()).await, 404);
    // a cookie altered to name alice is refused
    let tag = alice.rsplit_once('.').unwrap().1;
    let forged = format!(
        "chat_session={}.{tag}",
        br#"{"sub":"alice","exp":99999999999}"#
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    assert_eq!(get(forged).await, 401);
    // logout clears the cookie
    let r = c
        .get(format!("{base}logout"))
        .header("cookie", &alice)
        .send()
        .await
        .unwrap();
    let (cleared, whole) = set_cookie(&r, "chat_session");
    assert_eq!(cleared, "chat_session=");
    assert!(whole.contains("Max-Age=0"), "{whole}");
}

#[tokio::test]
async fn login_a_callback_without_its_login_or_with_another_state_or_a_used_code_is_refused() {
    let op = Provider::start().await;
    let fx = panel_with_login(&op).await;
    let base = fx.url();
    let c = client();
    let (login_cookie, back) = to_the_callback(&op, &c, &base).await;
    // the callback `url` from the browser that started the sign-in
    let from_here = |url: String| c.get(url).header("cookie", &login_cookie).send();
    // without the login cookie (another browser): refused
    let r = c.get(&back).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().await.unwrap().contains("not started here"));
    // another state
    let r = from_here(back.replace("state=", "state=00")).await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    // the right one works once; the code used again is refused by the provider
    let r = from_here(back.clone()).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = from_here(back.clone()).await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let text = r.text().await.unwrap();
    assert!(text.contains("invalid_grant"), "{text}");
    // the provider's error comes back as text, never as markup
    let r = from_here(format!("{base}callback?error=%3Cscript%3E&state=x"))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
}

/// signing out ends the session before its expiry — in every browser, not only the one
/// that asked (a copied cookie included) — and a new sign-in after it works; an operator signs
/// a person out the same way (`ChatPanel::sign_out`), leaving everyone else signed in. The
/// record is in the panel's session store, which every worker shares (the per-worker recheck:
/// `signout::tests`).
#[tokio::test]
async fn login_signing_out_ends_every_copy_of_the_session_and_a_new_sign_in_works() {
    let op = Provider::start().await;
    let fx = panel_with_login(&op).await;
    let base = fx.url();
    let c = client();
    let status = |cookie: String| {
        let c = c.clone();
        let url = format!("{base}api/sessions");
        async move {
            let r = c.post(url).header("cookie", cookie).send().await.unwrap();
            let s = r.status().as_u16();
            (s, r.text().await.unwrap())
        }
    };
    let first = sign_in(&op, &base, "alice").await;
    let other_browser = sign_in(&op, &base, "alice").await;
    let copied = first.clone();
    let bob = sign_in(&op, &base, "bob").await;
    for cookie in [&first, &other_browser, &bob] {
        assert_eq!(status(cookie.clone()).await.0, 200);
    }

    let r = c
        .get(format!("{base}logout"))
        .header("cookie", &first)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let (cleared, _) = set_cookie(&r, "chat_session");
    assert_eq!(cleared, "chat_session=");
    for cookie in [&copied, &other_browser] {
        let (s, body) = status(cookie.clone()).await;
        assert_eq!(s, 401, "{body}");
        assert!(body.contains("signed out"), "{body}");
        // the page sends a signed-out browser to sign in again
        let r = c.get(&base).header("cookie", cookie).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 303);
    }
    assert_eq!(status(bob.clone()).await.0, 200, "only alice signed out");
    let again = sign_in(&op, &base, "alice").await;
    assert_eq!(status(again.clone()).await.0, 200, "a new sign-in is good");

    fx.chat.sign_out("bob").await.unwrap();
    let (s, body) = status(bob).await;
    assert_eq!(s, 401, "{body}");
    assert_eq!(status(again).await.0, 200);
}

/// The ID token of a sign-in goes through the same checks as a bearer token: one whose `nbf`
/// is an hour or a day ahead, or whose `iat` says it was issued in the future (beyond the 30 s
/// leeway), or that has no `sub`, signs nobody in — the callback answers `400` saying why and
/// sets no session cookie; one within the leeway signs the person in.
#[tokio::test]
async fn a_sign_in_whose_id_token_is_not_yet_valid_is_refused() {
    let op = Provider::start().await;
    let fx = panel_with_login(&op).await;
    let base = fx.url();
    let c = client();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for (what, changes, why) in [
        (
            "nbf an hour ahead",
            json!({"nbf": now + 3600}),
            "the token is not valid yet",
        ),
        (
            "nbf a day ahead",
            json!({"nbf": now + 86_400}),
            "the token is not valid yet",
        ),
        (
            "iat an hour ahead",
            json!({"iat": now + 3600}),
            "the token says it was issued in the future",
        ),
        (
            "no sub",
            json!({"sub": null}),
            "the token has no `sub` claim (a string is required)",
        ),
    ] {
        op.id_tokens_with(changes);
        let (login_cookie, back) = to_the_callback(&op, &c, &base).await;
        let r = c
            .get(&back)
            .header("cookie", &login_cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{what}");
        let cookies: Vec<String> = r
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect();
        assert!(
            !cookies.iter().any(|c| c.starts_with("chat_session=")),
            "{what}: {cookies:?}"
        );
        let text = r.text().await.unwrap();
        assert!(text.contains(why), "{what}: {text}");
    }
    // clock skew within the leeway: signed in
    op.id_tokens_with(json!({"nbf": now + 10, "iat": now + 10}));
    let session = sign_in(&op, &base, "alice").await;
    let r = c
        .post(format!("{base}api/sessions"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

/// The page the callback answers after a sign-in runs no inline script: its one script is the
/// panel's file `/signed-in.js`, and its Content-Security-Policy says `script-src 'self'`.
#[tokio::test]
async fn the_signed_in_page_allows_no_inline_script() {
    let op = Provider::start().await;
    let fx = panel_with_login(&op).await;
    let base = fx.url();
    let c = client();
    let (login_cookie, back) = to_the_callback(&op, &c, &base).await;
    let r = c
        .get(&back)
        .header("cookie", &login_cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert!(
        csp.split(';').any(|d| d.trim() == "script-src 'self'"),
        "{csp}"
    );
    let html = r.text().await.unwrap();
    assert_eq!(
        html.matches("<script").count(),
        html.matches("<script src=\"/signed-in.js\"></script>")
            .count(),
        "{html}"
    );
    let js = c.get(format!("{base}signed-in.js")).send().await.unwrap();
    assert_eq!(js.status().as_u16(), 200);
    assert!(
        js.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    assert!(js.text().await.unwrap().contains("location.replace('/')"));
}
