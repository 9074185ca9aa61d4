//! A resource URI template (RFC 6570) filled with a person's values: the URI it makes, or why
//! the values cannot be used — a variable left empty, a name the template does not have, or a
//! URI the template does not make (a value that adds a `..` segment, a query or a fragment
//! where the template has none, or leaves its fixed start).

use std::collections::{BTreeMap, BTreeSet};

use iri_string::spec::UriSpec;
use iri_string::template::UriTemplateStr;
use iri_string::template::simple_context::SimpleContext;

/// Why a template's values were refused; the text says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum TemplateRefusal {
    /// The server's template is not an RFC 6570 template.
    #[error("the server's template {template:?} cannot be filled in ({reason})")]
    NotATemplate { template: String, reason: String },
    /// A variable the template has was not given (or given empty).
    #[error("fill in {name:?}: the template {template} needs it")]
    Missing { template: String, name: String },
    /// A value for a name the template does not have.
    #[error("the template {template} has no {name:?}; it takes {takes}")]
    Unknown {
        template: String,
        name: String,
        takes: String,
    },
    /// The values make a URI the template does not make.
    #[error("the values make {uri}, which the template {template} does not make: {reason}")]
    NotMade {
        template: String,
        uri: String,
        reason: &'static str,
    },
}

/// The variables of `template`, in the order they first appear.
pub(super) fn variables(template: &str) -> Result<Vec<String>, TemplateRefusal> {
    let t = parse(template)?;
    let mut seen = BTreeSet::new();
    Ok(t.variables()
        .map(|v| v.as_str().to_owned())
        .filter(|v| seen.insert(v.clone()))
        .collect())
}

fn parse(template: &str) -> Result<&UriTemplateStr, TemplateRefusal> {
    UriTemplateStr::new(template).map_err(|e| TemplateRefusal::NotATemplate {
        template: template.to_owned(),
        reason: e.to_string(),
    })
}

/// The URI `template` makes with `values` (every variable given, none other).
pub(super) fn uri_from(
    template: &str,
    values: &BTreeMap<String, String>,
) -> Result<String, TemplateRefusal> {
    let t = parse(template)?;
    let names = variables(template)?;
    if let Some(name) = values.keys().find(|k| !names.contains(k)) {
        return Err(TemplateRefusal::Unknown {
            template: template.to_owned(),
            name: name.clone(),
            takes: if names.is_empty() {
                "nothing".to_owned()
            } else {
                names.join(", ")
            },
        });
    }
    let mut context = SimpleContext::new();
    for name in &names {
        match values.get(name) {
            Some(v) if !v.trim().is_empty() => {
                context.insert(name.as_str(), v.as_str());
            }
            _ => {
                return Err(TemplateRefusal::Missing {
                    template: template.to_owned(),
                    name: name.clone(),
                });
            }
        }
    }
    let uri = t
        .expand::<UriSpec, _>(&context)
        .map_err(|e| TemplateRefusal::NotATemplate {
            template: template.to_owned(),
            reason: e.to_string(),
        })?
        .to_string();
    let refuse = |reason| {
        Err(TemplateRefusal::NotMade {
            template: template.to_owned(),
            uri: uri.clone(),
            reason,
        })
    };
    if iri_string::types::UriStr::new(&uri).is_err() {
        return refuse("it is not an absolute URI");
    }
    let fixed_start = &template[..template.find('{').unwrap_or(template.len())];
    if !uri.starts_with(fixed_start) {
        return refuse("it does not start as the template does");
    }
    let query_at = uri.find(['?', '#']).unwrap_or(uri.len());
    let path = &uri[..query_at];
    let dot = |s: &str| {
        let s = s.replace("%2E", ".").replace("%2e", ".");
        s == "." || s == ".."
    };
    if path.split('/').any(dot) {
        return refuse("a value may not be `.` or `..` where it makes a path segment");
    }
    if uri.contains('?') && !template.contains('?') && !template.contains("{&") {
        return refuse("a value may not add a query (`?`)");
    }
    if uri.contains('#') && !template.contains('#') {
        return refuse("a value may not add a fragment (`#`)");
    }
    Ok(uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    const TEXT: &str = "demo://resource/dynamic/text/{resourceId}";

    #[test]
    fn a_filled_template_makes_its_uri_with_the_values_encoded() {
        assert_eq!(
            uri_from(TEXT, &values(&[("resourceId", "7")])).unwrap(),
            "demo://resource/dynamic/text/7"
        );
        // a simple variable's slash and question mark are encoded: still one segment
        assert_eq!(
            uri_from(TEXT, &values(&[("resourceId", "a/b?c")])).unwrap(),
            "demo://resource/dynamic/text/a%2Fb%3Fc"
        );
        assert_eq!(
            uri_from(
                "file:///{+path}{?rev}",
                &values(&[("path", "src/lib.rs"), ("rev", "2")])
            )
            .unwrap(),
            "file:///src/lib.rs?rev=2"
        );
        assert_eq!(
            variables("x://{a}/{b}{?a}").unwrap(),
            vec!["a".to_owned(), "b".to_owned()]
        );
    }

    #[test]
    fn a_missing_or_empty_value_is_refused_naming_it() {
        for given in [values(&[]), values(&[("resourceId", "  ")])] {
            let e = uri_from(TEXT, &given).unwrap_err();
            assert!(matches!(&e, TemplateRefusal::Missing { name, .. } if name == "resourceId"));
            assert!(e.to_string().starts_with("fill in \"resourceId\""), "{e}");
        }
    }

    #[test]
    fn a_value_for_a_name_the_template_lacks_is_refused_with_what_it_takes() {
        let e = uri_from(TEXT, &values(&[("resourceId", "1"), ("id", "2")])).unwrap_err();
        assert!(e.to_string().contains("it takes resourceId"), "{e}");
    }

    #[test]
    fn values_that_make_a_uri_the_template_does_not_make_are_refused() {
        let not_made = |t: &str, v: &[(&str, &str)]| match uri_from(t, &values(v)) {
            Err(TemplateRefusal::NotMade { reason, .. }) => reason,
            other => panic!("{t} with {v:?}: {other:?}"),
        };
        assert!(not_made(TEXT, &[("resourceId", "..")]).contains("`..`"));
        // encoded dots stay dots where a reserved expansion keeps them
        assert!(not_made("file:///docs/{+path}", &[("path", "a/%2E%2E/b")]).contains("`..`"));
        // a simple expansion encodes the percent sign: a segment of its own, not `..`
        assert_eq!(
            uri_from(TEXT, &values(&[("resourceId", "%2E%2E")])).unwrap(),
            "demo://resource/dynamic/text/%252E%252E"
        );
        assert!(not_made("file:///docs/{+path}", &[("path", "../../etc/passwd")]).contains("`..`"));
        assert!(not_made("file:///docs/{+path}", &[("path", "a?x=1")]).contains("query"));
        assert!(not_made("file:///docs/{+path}", &[("path", "a#top")]).contains("fragment"));
        assert!(
            not_made("{+base}/x", &[("base", "no scheme")]).contains("absolute URI"),
            "a reserved value with a space is encoded, but without a scheme it is no URI"
        );
    }

    #[test]
    fn a_broken_template_is_refused_not_panicked_on() {
        let e = uri_from("demo://{unclosed", &values(&[])).unwrap_err();
        assert!(matches!(e, TemplateRefusal::NotATemplate { .. }), "{e:?}");
    }
}
