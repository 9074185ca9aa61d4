//! Who holds which resource subscription. Each [`Subscriber`] (the application, or a person by
//! principal) holds its own; the server is asked to subscribe when the first holder of a URI
//! comes and to unsubscribe when the last one lets go, so a person who stops watching never
//! ends the application's subscription to the same resource (or another person's).
//!
//! Bounded: one service holds at most [`MAX_SUBSCRIPTIONS`] URIs, one person at most
//! [`MAX_PERSON_SUBSCRIPTIONS`] across all services.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::error::BridgeError;

/// Most resource subscriptions one service holds at once (distinct URIs, whoever holds them).
pub const MAX_SUBSCRIPTIONS: usize = 100;
/// Most resource subscriptions one person ([`Subscriber::Person`]) holds at once, across all
/// services.
pub const MAX_PERSON_SUBSCRIPTIONS: usize = 20;

/// Who holds a resource subscription ([`McpBridge::subscribe_as`](crate::McpBridge::subscribe_as)).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Subscriber {
    /// The application itself: what [`McpBridge::subscribe`](crate::McpBridge::subscribe) holds.
    Application,
    /// A person, by their principal (the chat panel's signed-in identity); at most
    /// [`MAX_PERSON_SUBSCRIPTIONS`] each.
    Person(String),
}

impl fmt::Display for Subscriber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Application => f.write_str("the application"),
            Self::Person(principal) => write!(f, "person {principal}"),
        }
    }
}

/// Service → URI → its holders (never empty: a URI nobody holds is removed).
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    held: BTreeMap<String, BTreeMap<String, BTreeSet<Subscriber>>>,
}

impl Subscriptions {
    /// `who` holds `uri` of `service` from now on. `Ok(true)` when it is the first holder (the
    /// server must be asked), `Ok(false)` when the server already is subscribed (or `who`
    /// already held it). Refused past a bound.
    pub(crate) fn hold(
        &mut self,
        who: &Subscriber,
        service: &str,
        uri: &str,
    ) -> Result<bool, BridgeError> {
        let uris = self.held.get(service);
        if let Some(holders) = uris.and_then(|u| u.get(uri))
            && holders.contains(who)
        {
            return Ok(false);
        }
        let is_new_uri = uris.is_none_or(|u| !u.contains_key(uri));
        if is_new_uri && uris.map_or(0, BTreeMap::len) >= MAX_SUBSCRIPTIONS {
            return Err(BridgeError::ServiceSubscriptionsFull {
                service: service.to_owned(),
                most: MAX_SUBSCRIPTIONS,
            });
        }
        if let Subscriber::Person(principal) = who
            && self.held_by(who).len() >= MAX_PERSON_SUBSCRIPTIONS
        {
            return Err(BridgeError::PersonSubscriptionsFull {
                principal: principal.clone(),
                most: MAX_PERSON_SUBSCRIPTIONS,
            });
        }
        self.held
            .entry(service.to_owned())
            .or_default()
            .entry(uri.to_owned())
            .or_default()
            .insert(who.clone());
        Ok(is_new_uri)
    }

    /// `who` lets go of `uri` of `service`: `true` when it was the last holder (the server
    /// must be told to unsubscribe); `false` when others still hold it or `who` did not.
    pub(crate) fn let_go(&mut self, who: &Subscriber, service: &str, uri: &str) -> bool {
        let Some(uris) = self.held.get_mut(service) else {
            return false;
        };
        let Some(holders) = uris.get_mut(uri) else {
            return false;
        };
        if !holders.remove(who) || !holders.is_empty() {
            return false;
        }
        uris.remove(uri);
        if uris.is_empty() {
            self.held.remove(service);
        }
        true
    }

    /// The URIs of `service` someone holds (what a new connection subscribes again).
    pub(crate) fn uris(&self, service: &str) -> Vec<String> {
        self.held
            .get(service)
            .map(|uris| uris.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether someone holds `uri` of `service`.
    pub(crate) fn wanted(&self, service: &str, uri: &str) -> bool {
        self.held
            .get(service)
            .is_some_and(|uris| uris.contains_key(uri))
    }

    /// `(service, uri)` of every subscription `who` holds, in order.
    pub(crate) fn held_by(&self, who: &Subscriber) -> Vec<(String, String)> {
        self.held
            .iter()
            .flat_map(|(service, uris)| {
                uris.iter()
                    .filter(|(_, holders)| holders.contains(who))
                    .map(move |(uri, _)| (service.clone(), uri.clone()))
            })
            .collect()
    }

    /// Forgets every subscription of `service`, whoever held it.
    pub(crate) fn forget_service(&mut self, service: &str) {
        self.held.remove(service);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn person(p: &str) -> Subscriber {
        Subscriber::Person(p.to_owned())
    }

    #[test]
    fn a_persons_unwatch_leaves_the_applications_subscription_with_the_server() {
        let mut s = Subscriptions::default();
        assert!(s.hold(&Subscriber::Application, "svc", "a://1").unwrap());
        // The person joins a subscription the server already has: nothing to ask.
        assert!(!s.hold(&person("ann"), "svc", "a://1").unwrap());
        // The person lets go: the application still holds it, the server is not told.
        assert!(!s.let_go(&person("ann"), "svc", "a://1"));
        assert!(s.wanted("svc", "a://1"));
        assert_eq!(s.uris("svc"), vec!["a://1".to_owned()]);
        assert!(s.held_by(&person("ann")).is_empty());
        // The last holder lets go: now the server is told.
        assert!(s.let_go(&Subscriber::Application, "svc", "a://1"));
        assert!(!s.wanted("svc", "a://1"));
        assert!(s.uris("svc").is_empty());
    }

    #[test]
    fn the_last_holder_unsubscribes_whichever_order_they_leave_in() {
        let mut s = Subscriptions::default();
        assert!(s.hold(&person("ann"), "svc", "a://1").unwrap());
        assert!(!s.hold(&person("bob"), "svc", "a://1").unwrap());
        assert!(!s.hold(&Subscriber::Application, "svc", "a://1").unwrap());
        // Holding twice is one hold: one let-go ends it.
        assert!(!s.hold(&person("ann"), "svc", "a://1").unwrap());
        assert!(!s.let_go(&Subscriber::Application, "svc", "a://1"));
        assert!(!s.let_go(&person("ann"), "svc", "a://1"));
        // Letting go of what one does not hold changes nothing.
        assert!(!s.let_go(&person("ann"), "svc", "a://1"));
        assert!(!s.let_go(&person("carl"), "svc", "a://1"));
        assert!(!s.let_go(&person("bob"), "other", "a://1"));
        assert!(s.wanted("svc", "a://1"));
        assert!(s.let_go(&person("bob"), "svc", "a://1"));
        assert!(!s.wanted("svc", "a://1"));
    }

    #[test]
    fn a_person_is_refused_past_their_cap_and_others_are_not() {
        let mut s = Subscriptions::default();
        for i in 0..MAX_PERSON_SUBSCRIPTIONS {
            // spread over two services: the cap is per person, across services
            let service = if i % 2 == 0 { "one" } else { "two" };
            s.hold(&person("ann"), service, &format!("a://{i}"))
                .unwrap();
        }
        let err = s.hold(&person("ann"), "one", "a://more").unwrap_err();
        assert_eq!(
            err,
            BridgeError::PersonSubscriptionsFull {
                principal: "ann".into(),
                most: MAX_PERSON_SUBSCRIPTIONS
            }
        );
        assert!(err.to_string().contains("stop watching one first"), "{err}");
        assert!(!s.wanted("one", "a://more"));
        // What she already holds is no new hold; another person and the application are free.
        assert!(!s.hold(&person("ann"), "one", "a://0").unwrap());
        assert!(s.hold(&person("bob"), "one", "a://more").unwrap());
        assert!(!s.hold(&Subscriber::Application, "one", "a://more").unwrap());
        // Letting go makes room.
        s.let_go(&person("ann"), "one", "a://0");
        assert!(!s.hold(&person("ann"), "one", "a://more").unwrap());
        assert_eq!(s.held_by(&person("ann")).len(), MAX_PERSON_SUBSCRIPTIONS);
    }

    #[test]
    fn a_service_is_refused_a_new_uri_past_its_cap_but_joins_on_held_ones() {
        let mut s = Subscriptions::default();
        for i in 0..MAX_SUBSCRIPTIONS {
            s.hold(&Subscriber::Application, "svc", &format!("a://{i}"))
                .unwrap();
        }
        let err = s
            .hold(&Subscriber::Application, "svc", "a://more")
            .unwrap_err();
        assert!(matches!(
            err,
            BridgeError::ServiceSubscriptionsFull { ref service, most } if service == "svc" && most == MAX_SUBSCRIPTIONS
        ));
        assert!(
            err.to_string().contains("unsubscribe from one first"),
            "{err}"
        );
        // A person may still join a URI the service already holds, and another service is free.
        assert!(!s.hold(&person("ann"), "svc", "a://3").unwrap());
        assert!(s.hold(&person("ann"), "other", "a://more").unwrap());
    }

    #[test]
    fn forgetting_a_service_drops_every_holder_of_it() {
        let mut s = Subscriptions::default();
        s.hold(&Subscriber::Application, "svc", "a://1").unwrap();
        s.hold(&person("ann"), "svc", "a://2").unwrap();
        s.hold(&person("ann"), "keep", "a://3").unwrap();
        s.forget_service("svc");
        assert!(s.uris("svc").is_empty());
        assert_eq!(
            s.held_by(&person("ann")),
            vec![("keep".to_owned(), "a://3".to_owned())]
        );
    }
}
