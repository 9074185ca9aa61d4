//! What a server offers besides tools: resources (listed, read, and the templates they are made
//! from), prompts (listed, and got with their arguments), and completions of the arguments of
//! both, for the application to show a person or hand a model.
//!
//! Every request goes to a running service (started first when it is registered but not
//! running), only when its `initialize` answer offers the feature, within the service's call
//! timeout. A list is read page by page up to [`MAX_LISTED`] entries or [`MAX_PAGES`] pages: a
//! server that pages forever is cut off there, with a warning, not followed. Contents become the
//! toolkit's own [`Part`]s and [`Message`]s the same way a tool result's do: media whose bytes
//! belie their type, or broken base64, is named in the text instead.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceError;
use rmcp::model::{
    ArgumentInfo, CompleteRequestParams, ContentBlock, Cursor, GetPromptRequestParams,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, Reference, Role,
    SubscribeRequestParams, UnsubscribeRequestParams,
};
use serde::Serialize;
use toolwright_core::{Message, Part};

use crate::bridge::McpBridge;
use crate::connection::Connection;
use crate::error::BridgeError;
use crate::notices::McpNotice;
use crate::registry::ServiceStatus;
use crate::subscriptions::Subscriber;
use crate::sync::lock;

/// Most entries one list keeps.
pub const MAX_LISTED: usize = 10_000;
/// Most pages one list reads.
pub const MAX_PAGES: usize = 100;

/// A resource a server offers (`resources/list`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct McpResource {
    /// The service that offers it.
    pub service: String,
    /// Its URI: what [`McpBridge::read_resource`] takes.
    pub uri: String,
    /// Its name.
    pub name: String,
    /// A title for people, when the server gave one.
    pub title: Option<String>,
    /// What it is.
    pub description: Option<String>,
    /// Its media type, when the server said.
    pub mime_type: Option<String>,
    /// Its size in bytes, when the server said.
    pub size: Option<u64>,
}

/// A URI template a server makes resources from (`resources/templates/list`), RFC 6570.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct McpResourceTemplate {
    /// The service that offers it.
    pub service: String,
    /// The template, e.g. `demo://resource/dynamic/text/{resourceId}`.
    pub uri_template: String,
    /// Its name.
    pub name: String,
    /// A title for people, when the server gave one.
    pub title: Option<String>,
    /// What it makes.
    pub description: Option<String>,
    /// The media type of what it makes, when the server said.
    pub mime_type: Option<String>,
}

/// A prompt a server offers (`prompts/list`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct McpPrompt {
    /// The service that offers it.
    pub service: String,
    /// Its name: what [`McpBridge::get_prompt`] takes.
    pub name: String,
    /// A title for people, when the server gave one.
    pub title: Option<String>,
    /// What it is for.
    pub description: Option<String>,
    /// The arguments it takes.
    pub arguments: Vec<McpPromptArgument>,
}

/// One argument of an [`McpPrompt`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct McpPromptArgument {
    /// Its name.
    pub name: String,
    /// What to give.
    pub description: Option<String>,
    /// Whether the prompt needs it.
    pub required: bool,
}

/// What an argument being completed belongs to ([`McpBridge::complete`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionOf<'a> {
    /// An argument of the prompt of this name.
    Prompt(&'a str),
    /// A variable of this resource URI template.
    ResourceTemplate(&'a str),
}

impl McpBridge {
    /// The resources `service` offers.
    pub async fn resources(&self, service: &str) -> Result<Vec<McpResource>, BridgeError> {
        let (c, timeout) = self.offering(service, Feature::Resources).await?;
        let listed = paged(service, "resources/list", timeout, |cursor| {
            let c = c.clone();
            async move {
                let page = c
                    .peer
                    .list_resources(Some(PaginatedRequestParams::default().with_cursor(cursor)))
                    .await?;
                Ok((page.resources, page.next_cursor))
            }
        })
        .await?;
        Ok(listed
            .into_iter()
            .map(|r| McpResource {
                service: service.to_owned(),
                uri: r.uri,
                name: r.name,
                title: r.title,
                description: r.description,
                mime_type: r.mime_type,
                size: r.size,
            })
            .collect())
    }

    /// The resource URI templates `service` offers.
    pub async fn resource_templates(
        &self,
        service: &str,
    ) -> Result<Vec<McpResourceTemplate>, BridgeError> {
        let (c, timeout) = self.offering(service, Feature::Resources).await?;
        let listed = paged(service, "resources/templates/list", timeout, |cursor| {
            let c = c.clone();
            async move {
                let page = c
                    .peer
                    .list_resource_templates(Some(
                        PaginatedRequestParams::default().with_cursor(cursor),
                    ))
                    .await?;
                Ok((page.resource_templates, page.next_cursor))
            }
        })
        .await?;
        Ok(listed
            .into_iter()
            .map(|t| McpResourceTemplate {
                service: service.to_owned(),
                uri_template: t.uri_template,
                name: t.name,
                title: t.title,
                description: t.description,
                mime_type: t.mime_type,
            })
            .collect())
    }

    /// Reads the resource at `uri` from `service`: its text as a text part, then its images,
    /// audio and other binary contents as parts (a binary resource keeps its URI as its name).
    pub async fn read_resource(&self, service: &str, uri: &str) -> Result<Vec<Part>, BridgeError> {
        let (c, timeout) = self.offering(service, Feature::Resources).await?;
        let read = c
            .peer
            .read_resource(ReadResourceRequestParams::new(uri.to_owned()));
        let result = within(service, "resources/read", timeout, read).await?;
        let blocks: Vec<ContentBlock> = result
            .contents
            .into_iter()
            .map(ContentBlock::resource)
            .collect();
        Ok(with_text_first(crate::execution::content_parts(&blocks)))
    }

    /// The prompts `service` offers.
    pub async fn prompts(&self, service: &str) -> Result<Vec<McpPrompt>, BridgeError> {
        let (c, timeout) = self.offering(service, Feature::Prompts).await?;
        let listed = paged(service, "prompts/list", timeout, |cursor| {
            let c = c.clone();
            async move {
                let page = c
                    .peer
                    .list_prompts(Some(PaginatedRequestParams::default().with_cursor(cursor)))
                    .await?;
                Ok((page.prompts, page.next_cursor))
            }
        })
        .await?;
        Ok(listed
            .into_iter()
            .map(|p| McpPrompt {
                service: service.to_owned(),
                name: p.name,
                title: p.title,
                description: p.description,
                arguments: p
                    .arguments
                    .unwrap_or_default()
                    .into_iter()
                    .map(|a| McpPromptArgument {
                        name: a.name,
                        description: a.description,
                        required: a.required == Some(true),
                    })
                    .collect(),
            })
            .collect())
    }

    /// The prompt `name` of `service` with `arguments` filled in, as messages to start a
    /// conversation with (or add to one). A missing required argument is the server's to
    /// refuse: its message comes back in [`BridgeError::Request`].
    pub async fn get_prompt(
        &self,
        service: &str,
        name: &str,
        arguments: &BTreeMap<String, String>,
    ) -> Result<Vec<Message>, BridgeError> {
        let (c, timeout) = self.offering(service, Feature::Prompts).await?;
        let mut params = GetPromptRequestParams::new(name.to_owned());
        if !arguments.is_empty() {
            params = params.with_arguments(
                arguments
                    .iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect(),
            );
        }
        let result = within(service, "prompts/get", timeout, c.peer.get_prompt(params)).await?;
        Ok(result
            .messages
            .into_iter()
            .map(|m| {
                let (text, parts) =
                    crate::execution::content_parts(std::slice::from_ref(&m.content));
                match m.role {
                    Role::User => Message::user_with_parts(text, parts),
                    Role::Assistant => Message::assistant(text).with_parts(parts),
                }
            })
            .collect())
    }

    /// The values `service` suggests for argument `argument` of a prompt or a resource
    /// template, given what has been typed so far (`value`); at most 100, the server's order.
    pub async fn complete(
        &self,
        service: &str,
        of: CompletionOf<'_>,
        argument: &str,
        value: &str,
    ) -> Result<Vec<String>, BridgeError> {
        let (c, timeout) = self.offering(service, Feature::Completions).await?;
        let reference = match of {
            CompletionOf::Prompt(name) => Reference::for_prompt(name),
            CompletionOf::ResourceTemplate(uri) => Reference::for_resource(uri),
        };
        let params = CompleteRequestParams::new(reference, ArgumentInfo::new(argument, value));
        let result = within(
            service,
            "completion/complete",
            timeout,
            c.peer.complete(params),
        )
        .await?;
        let mut values = result.completion.values;
        values.truncate(100);
        Ok(values)
    }

    /// The application's own subscription to the resource `uri` of `service`: the same as
    /// [`subscribe_as`](Self::subscribe_as) with [`Subscriber::Application`].
    pub async fn subscribe(&self, service: &str, uri: &str) -> Result<(), BridgeError> {
        self.subscribe_as(&Subscriber::Application, service, uri)
            .await
    }

    /// Ends the application's own subscription to `uri`: the same as
    /// [`unsubscribe_as`](Self::unsubscribe_as) with [`Subscriber::Application`].
    pub async fn unsubscribe(&self, service: &str, uri: &str) -> Result<(), BridgeError> {
        self.unsubscribe_as(&Subscriber::Application, service, uri)
            .await
    }

    /// `who` subscribes to the resource `uri` of `service`: each change is then an
    /// [`McpNotice::ResourceUpdated`] on [`McpBridge::notices`]. Each subscriber holds its own
    /// subscription; the server is sent `resources/subscribe` when the first one comes, and
    /// `resources/unsubscribe` only when the last one lets go
    /// ([`unsubscribe_as`](Self::unsubscribe_as)), so a person who stops watching does not end
    /// the application's subscription. Subscribing twice is one subscription. Subscriptions
    /// outlive a restart of the server (they are made again when the service starts).
    ///
    /// Bounded: a service holds at most [`MAX_SUBSCRIPTIONS`](crate::MAX_SUBSCRIPTIONS) resources
    /// ([`BridgeError::ServiceSubscriptionsFull`]), a person at most
    /// [`MAX_PERSON_SUBSCRIPTIONS`](crate::MAX_PERSON_SUBSCRIPTIONS)
    /// ([`BridgeError::PersonSubscriptionsFull`]).
    ///
    /// Servers on the session revisions (up to 2025-11-25) that offer subscriptions; on a
    /// 2026-07-28 connection this is `NotOffered` (that revision subscribes through a listen
    /// stream, which the bridge does not open).
    pub async fn subscribe_as(
        &self,
        who: &Subscriber,
        service: &str,
        uri: &str,
    ) -> Result<(), BridgeError> {
        let (c, timeout) = self.offering(service, Feature::Subscriptions).await?;
        let notices = &self.inner.notices;
        let _turn = notices.subscribing.lock().await;
        if !lock(&notices.subscribed).hold(who, service, uri)? {
            return Ok(()); // the server is subscribed already
        }
        #[allow(deprecated)] // the session revisions' way, which these servers speak
        let asked = c.peer.subscribe(SubscribeRequestParams::new(uri));
        let answered = within(service, "resources/subscribe", timeout, asked).await;
        if answered.is_err() {
            lock(&notices.subscribed).let_go(who, service, uri);
        }
        answered
    }

    /// `who` lets go of its subscription to `uri`; the server is told
    /// (`resources/unsubscribe`) when nobody else holds it, and from then on no notice for it
    /// is passed on, even if the server goes on sending them. Letting go of what `who` does
    /// not hold does nothing.
    pub async fn unsubscribe_as(
        &self,
        who: &Subscriber,
        service: &str,
        uri: &str,
    ) -> Result<(), BridgeError> {
        let notices = &self.inner.notices;
        let _turn = notices.subscribing.lock().await;
        if !lock(&notices.subscribed).let_go(who, service, uri) {
            return Ok(()); // others still hold it, or `who` did not
        }
        let Some((c, timeout)) = self.connection_of(service) else {
            return Ok(()); // not running: nothing to tell, and it will not be made again
        };
        #[allow(deprecated)]
        let asked = c.peer.unsubscribe(UnsubscribeRequestParams::new(uri));
        within(service, "resources/unsubscribe", timeout, asked).await
    }

    /// `(service, uri)` of every resource subscription `who` holds, in order (for a page to
    /// show which resources a person watches).
    pub fn subscriptions_of(&self, who: &Subscriber) -> Vec<(String, String)> {
        lock(&self.inner.notices.subscribed).held_by(who)
    }

    /// What servers say between answers, from now on: progress of running calls, log
    /// messages, subscribed resources that changed, and changed lists ([`McpNotice`]).
    ///
    /// Each receiver gets every notice sent after it was made. One that falls more than
    /// [`NOTICE_BUFFER`](crate::NOTICE_BUFFER) notices behind loses the oldest and is told how
    /// many (`RecvError::Lagged`); a server is never slowed by a reader.
    pub fn notices(&self) -> tokio::sync::broadcast::Receiver<McpNotice> {
        self.inner.notices.receiver()
    }

    /// The running connection of `service` when its server offers `feature` (started first
    /// when it is registered but not running), with its call timeout.
    async fn offering(
        &self,
        service: &str,
        feature: Feature,
    ) -> Result<(Arc<Connection>, Duration), BridgeError> {
        let mut running = self.connection_of(service);
        if running.is_none() && self.ensure_running(service).await {
            running = self.connection_of(service);
        }
        let Some((connection, timeout)) = running else {
            return Err(match self.status(service)? {
                ServiceStatus::Error(reason) => BridgeError::StartFailed {
                    service: service.to_owned(),
                    reason,
                },
                other => BridgeError::StartFailed {
                    service: service.to_owned(),
                    reason: format!("it is {other:?}, not running"),
                },
            });
        };
        let offered = connection.peer.peer_info().is_some_and(|info| {
            let caps = &info.capabilities;
            match feature {
                Feature::Resources => caps.resources.is_some(),
                Feature::Prompts => caps.prompts.is_some(),
                Feature::Completions => caps.completions.is_some(),
                Feature::Subscriptions => {
                    info.protocol_version < ProtocolVersion::V_2026_07_28
                        && caps.resources.as_ref().and_then(|r| r.subscribe) == Some(true)
                }
            }
        });
        if !offered {
            return Err(BridgeError::NotOffered {
                service: service.to_owned(),
                feature: feature.name(),
            });
        }
        Ok((connection, timeout))
    }
}

#[derive(Debug, Clone, Copy)]
enum Feature {
    Resources,
    Prompts,
    Completions,
    Subscriptions,
}

impl Feature {
    fn name(self) -> &'static str {
        match self {
            Self::Resources => "resources",
            Self::Prompts => "prompts",
            Self::Completions => "completions",
            Self::Subscriptions => "resource subscriptions",
        }
    }
}

/// The text (when there is any) as the first part, then the media.
fn with_text_first((text, media): (String, Vec<Part>)) -> Vec<Part> {
    let mut parts = Vec::with_capacity(media.len() + 1);
    if !text.is_empty() {
        parts.push(Part::Text { text });
    }
    parts.extend(media);
    parts
}

/// One request within the service's call timeout; its failure named with the method.
async fn within<T>(
    service: &str,
    method: &'static str,
    timeout: Duration,
    request: impl Future<Output = Result<T, ServiceError>>,
) -> Result<T, BridgeError> {
    let failed = |reason: String| BridgeError::Request {
        service: service.to_owned(),
        method,
        reason,
    };
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(ServiceError::McpError(e))) => Err(failed(e.message.into_owned())),
        Ok(Err(e)) => Err(failed(e.to_string())),
        Err(_) => Err(failed(format!(
            "no answer within {} ms (the service's call timeout)",
            timeout.as_millis()
        ))),
    }
}

/// Every page of a list, each within the timeout, up to [`MAX_LISTED`] entries and
/// [`MAX_PAGES`] pages (then cut off, with a warning).
async fn paged<T, F, Fut>(
    service: &str,
    method: &'static str,
    timeout: Duration,
    mut page: F,
) -> Result<Vec<T>, BridgeError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<Cursor>), ServiceError>>,
{
    let mut all = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let (items, next) = within(service, method, timeout, page(cursor.take())).await?;
        all.extend(items);
        if all.len() >= MAX_LISTED {
            all.truncate(MAX_LISTED);
            tracing::warn!(service, method, "the list was cut at {MAX_LISTED} entries");
            return Ok(all);
        }
        match next {
            Some(c) if !c.is_empty() => cursor = Some(c),
            _ => return Ok(all),
        }
    }
    tracing::warn!(service, method, "the list was cut at {MAX_PAGES} pages");
    Ok(all)
}
