//! `object_store`'s errors in a line for users: the status the store
//! answered and its own error code and message, without the request line,
//! the URL (which may carry a signature) or the retry settings that
//! `object_store` 0.14 puts in its text (its status is not public).

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
            if let Some(message) = between(body, "<Message>", "</Message>").and_then(|m| m.lines().next()) {
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
        assert_eq!(describe(&e), "the store answered 404 Not Found (BlobNotFound): The specified blob does not exist.");
    }

    #[test]
    fn other_errors_keep_their_text() {
        assert_eq!(describe(&generic("the disk went away")), "Generic S error: the disk went away");
        let e = generic("Error performing GET http://h/o in 10s - HTTP error: error sending request\nmore");
        assert_eq!(describe(&e), "HTTP error: error sending request");
    }
}
