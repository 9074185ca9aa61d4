//! What the bus accepts as a message id and as a recipient family, checked in front of every
//! backend so that all of them refuse the same things the same way.

use super::{BusError, MAX_FAMILY_LEN, MAX_MSG_ID_LEN};

pub(crate) fn check_msg_id(id: &str) -> Result<(), BusError> {
    let ok =
        !id.is_empty() && id.len() <= MAX_MSG_ID_LEN && id.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(BusError::BadMessageId(id.chars().take(160).collect()))
    }
}

fn valid_family(f: &str) -> bool {
    (1..=MAX_FAMILY_LEN).contains(&f.len())
        && f != "_"
        && f.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

pub(crate) fn check_family(f: &str) -> Result<(), BusError> {
    if valid_family(f) {
        Ok(())
    } else {
        Err(BusError::BadFamily(f.chars().take(80).collect()))
    }
}

/// The family of a recipient id: the part before its first ':', when that is a valid family.
pub(crate) fn family_of(recipient: &str) -> Option<&str> {
    recipient
        .split_once(':')
        .map(|(f, _)| f)
        .filter(|f| valid_family(f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MessageBus, OutgoingMessage};

    #[tokio::test]
    async fn bad_message_ids_are_refused_before_sending() {
        let bus = MessageBus::new();
        let mut inbox = bus.subscribe("r");
        for bad in ["", "a b", "tab\t", "é", &"x".repeat(MAX_MSG_ID_LEN + 1)] {
            let e = bus
                .send(OutgoingMessage::new("s", "r", "t").with_msg_id(bad))
                .await
                .unwrap_err();
            assert!(matches!(e, BusError::BadMessageId(_)), "{bad:?}");
        }
        assert!(inbox.try_recv().is_none());
        let ok = "x".repeat(MAX_MSG_ID_LEN);
        bus.send(OutgoingMessage::new("s", "r", "t").with_msg_id(&ok))
            .await
            .unwrap();
        assert_eq!(inbox.try_recv().unwrap().msg_id, ok);
    }

    #[test]
    fn q7_group_family_is_checked() {
        let bus = MessageBus::new();
        for bad in [
            "",
            "_",
            "user:*",
            "a.b",
            "a b",
            "é",
            "*",
            ">",
            &"f".repeat(65),
        ] {
            let e = bus.subscribe_group(bad).unwrap_err();
            assert!(matches!(e, BusError::BadFamily(_)), "{bad:?}");
            assert!(e.to_string().contains("A-Z a-z 0-9 _ -"), "{e}");
        }
        for ok in ["user", "a", "A_b-9", "__", &"f".repeat(64)] {
            assert!(bus.subscribe_group(ok).is_ok(), "{ok:?}");
        }
        assert_eq!(family_of("user:1:2"), Some("user"));
        assert_eq!(family_of("user"), None);
        assert_eq!(family_of("_:1"), None);
        assert_eq!(family_of("a.b:1"), None);
    }
}
