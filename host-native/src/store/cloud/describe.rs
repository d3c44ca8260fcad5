//! What `object_store`'s errors say: in a line for users (the status the
//! store answered and its own error code and message, without the request
//! line, the URL, which may carry a signature, or the retry settings), and
//! whether another attempt may help. `object_store` 0.14 keeps the HTTP
//! status inside its error's text (the type that carries it is not
//! public), so both are read from the text.

/// What `e` says, for the detail of an [`crate::Error::Store`].
pub(super) fn describe(e: &object_store::Error) -> String {
    let text = e.to_string();
    let Some(at) = text.find("Error performing ") else { return text };
    let request = &text[at..];
    let retries = between(request, ", after ", " retries").map(|n| format!(", after {n} retries"));
    let inner = request.split_once(" - ").map_or(request, |(_, inner)| inner.trim());
    let what = match inner.strip_prefix("Server returned non-2xx status code: ") {
        Some(rest) => {
            let (status, body) = rest.split_once(": ").unwrap_or((rest, ""));
            let mut what = format!("the store answered {}", status.trim().trim_end_matches(':'));
            if let Some(code) = between(body, "<Code>", "</Code>") {
                what += &format!(" ({code})");
            }
            if let Some(message) =
                between(body, "<Message>", "</Message>").and_then(|m| m.lines().next())
            {
                what += &format!(": {}", message.trim());
            } else if !body.trim().is_empty() && !body.trim_start().starts_with('<') {
                what += &format!(": {}", first_line(body));
            }
            what
        }
        None => first_line(inner).to_string(),
    };
    what + retries.as_deref().unwrap_or("")
}

/// Whether a failed request is worth another attempt: a connection that
/// failed or timed out, or an answer of 5xx, 408 or 429. Not a 4xx, a
/// missing object, refused credentials or a changed ETag, nor a response
/// that is not what a ranged `GET` must return (`object_store`'s own
/// checks of it): those say something of the store, not of the moment.
pub(super) fn transient(e: &object_store::Error) -> bool {
    let object_store::Error::Generic { .. } = e else { return false };
    let text = e.to_string();
    if !text.contains("Error performing ") {
        return false;
    }
    match status_in(&text) {
        Some(status) => status >= 500 || status == 408 || status == 429,
        None => true,
    }
}

/// Whether a ranged `GET` was refused as unsatisfiable: what stores answer
/// for an empty object (HTTP 416; Azurite a 206 with `Content-Range: bytes
/// 0--1/0`; `object_store`'s in-memory store its own range check).
pub(super) fn unsatisfiable(e: &object_store::Error) -> bool {
    const SIGNS: [&str; 4] =
        ["Range Not Satisfiable", "InvalidRange", "CONTENT_RANGE", "Wanted range starting at"];
    let text = e.to_string();
    matches!(e, object_store::Error::Generic { .. })
        && (status_in(&text) == Some(416) || SIGNS.iter().any(|sign| text.contains(sign)))
}

/// The HTTP status in an `object_store` error's text, if it has one.
fn status_in(text: &str) -> Option<u16> {
    let (_, rest) = text.split_once("status code: ")?;
    rest.get(..3)?.parse().ok()
}

/// The text between the first `open` and the next `close` in `s`.
fn between<'a>(s: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let (_, rest) = s.split_once(open)?;
    rest.split_once(close).map(|(inside, _)| inside).filter(|inside| !inside.is_empty())
}

/// The first line of `s`, trimmed, at most 300 characters.
fn first_line(s: &str) -> &str {
    let line = s.trim().lines().next().unwrap_or("").trim();
    match line.char_indices().nth(300) {
        Some((cut, _)) => &line[..cut],
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(text: &str) -> object_store::Error {
        object_store::Error::Generic { store: "S", source: text.to_string().into() }
    }

    #[test]
    fn status_code_and_message_replace_the_request_line() {
        let e = generic(
            "Error performing GET http://127.0.0.1:1/c/o?sig=secret in 3.2s, after 5 retries, max_retries: 5, \
             retry_timeout: 180s  - Server returned non-2xx status code: 503 Service Unavailable: ",
        );
        assert_eq!(describe(&e), "the store answered 503 Service Unavailable, after 5 retries");
        let e = object_store::Error::NotFound {
            path: "o".into(),
            source: "Error performing GET http://h/o in 1ms - Server returned non-2xx status code: 404 Not Found: \
                     <?xml version=\"1.0\"?>\n<Error>\n  <Code>BlobNotFound</Code>\n  <Message>The specified blob \
                     does not exist.\nRequestId:1</Message>\n</Error>"
                .into(),
        };
        assert_eq!(
            describe(&e),
            "the store answered 404 Not Found (BlobNotFound): The specified blob does not exist."
        );
    }

    #[test]
    fn only_failures_of_the_moment_are_worth_a_retry() {
        let status = |code: &str| {
            generic(&format!(
                "Error performing GET http://h/o in 1ms - Server returned non-2xx status code: {code}: "
            ))
        };
        assert!(
            transient(&status("503 Service Unavailable"))
                && transient(&status("429 Too Many Requests"))
        );
        assert!(
            !transient(&status("400 Bad Request"))
                && !transient(&status("416 Range Not Satisfiable"))
        );
        assert!(transient(&generic(
            "Error performing GET http://h/o in 10s - HTTP error: error sending request"
        )));
        assert!(!transient(&generic("Received non-partial response when range requested")));
        assert!(!transient(&object_store::Error::NotFound {
            path: "o".into(),
            source: "gone".into()
        }));
        assert!(unsatisfiable(&status("416 Range Not Satisfiable")));
        assert!(unsatisfiable(&generic(
            "Failed to parse value for CONTENT_RANGE header: \"bytes 0--1/0\""
        )));
        assert!(!unsatisfiable(&status("503 Service Unavailable")));
    }

    #[test]
    fn other_errors_keep_their_text() {
        assert_eq!(describe(&generic("the disk went away")), "Generic S error: the disk went away");
        let e = generic(
            "Error performing GET http://h/o in 10s - HTTP error: error sending request\nmore",
        );
        assert_eq!(describe(&e), "HTTP error: error sending request");
    }
}
