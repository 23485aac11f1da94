"""The generate extension's routes: ``.../generate`` (one JSON answer) and
``.../generate_stream`` (server-sent events, one per response), over the
codec in http_generate.py."""

from __future__ import annotations

from pyserver.engine.protocol.http_codec import encode_json
from pyserver.frontends.http.framing import (
    JSON_HEADERS,
    Slot,
    StreamSlot,
    error_body,
    event_stream_head,
    sse_event,
)
from pyserver.frontends.http_generate import decode_generate_request, generate_response
from pyserver.frontends.load_report import FORMAT_HEADER, REPORT_HEADER, load_report
from pyserver.kernel.errors import ServerError


def generate(conn, method, headers, body, keep_alive, model, version):
    return _generate(conn, model, version, body, keep_alive, False, headers.get(FORMAT_HEADER))


def generate_stream(conn, method, headers, body, keep_alive, model, version):
    return _generate(conn, model, version, body, keep_alive, True, headers.get(FORMAT_HEADER))


def _generate(conn, model: str, version: str, body: bytes, keep_alive: bool, stream: bool,
              report_format: bytes | None):
    """``report_format``: the ORCA load report asked for (load_report.py),
    written on the answer once the model has taken the request."""
    server = conn.server
    try:
        request = decode_generate_request(model, version, body,
                                          server.model_config(model, version),
                                          conn.frontend.max_input_size)
        forwarder = conn.frontend.header_forwarder
        if forwarder is not None:
            forwarder.forward(conn.raw_headers, request.parameters)
    except Exception as e:
        return conn.respond_exception(e, keep_alive)
    http10 = conn.http10
    if stream:
        slot = StreamSlot(not keep_alive)
    else:
        slot = Slot(not keep_alive)
        got = []
    conn.pending.append(slot)
    # Nothing is written before submit has taken the request: bad input is
    # an HTTP error (400, 404...), as in Triton, not a 200 stream that
    # carries it; what fails later arrives as an error event.
    started = False
    head_sent = False

    def on_response(response, error, final):
        nonlocal head_sent
        if stream:
            if not head_sent:  # the head goes with the first response, its status too
                head_sent = True
                slot.chunks.append(_stream_head(keep_alive, load_report(
                    report_format, server.custom_metrics), _status_of(error)))
            if error is not None:
                slot.add(sse_event({"error": str(error)}))
            elif response is not None and response.outputs:
                slot.add(sse_event(generate_response(response)))
            if final:
                slot.finish()
        else:
            if error is not None or (response is not None and response.outputs):
                got.append((response, error))
            if final:
                report = load_report(report_format, server.custom_metrics)
                slot.data = _answer(conn, got, keep_alive, http10, report)
        if started:
            conn.answered()

    try:
        server.submit_stream(request, on_response)
    except Exception as e:
        error = conn.error_data(e, keep_alive, http10)
        if stream:
            slot.chunks = error
            slot.done = True
        else:
            slot.data = error
        conn.answered()
        return
    started = True
    conn.answered()


def _status_of(error) -> int:
    """The answer's status as Triton sets it from its first response: that
    response's error's, else 200 (later errors only show in the body)."""
    if error is None:
        return 200
    return error.http_status if isinstance(error, ServerError) else 500


def _stream_head(keep_alive: bool, report: bytes | None, status: int) -> bytes:
    """The stream's head, written with its first response as Triton does
    (the load report then says what that response left)."""
    return event_stream_head(keep_alive, b"" if report is None
                             else b"%s: %s\r\n" % (REPORT_HEADER, report), status)


def _answer(conn, got: list, keep_alive: bool, http10: bool, report: bytes | None) -> list:
    headers = JSON_HEADERS if report is None else [*JSON_HEADERS, (REPORT_HEADER, report)]
    if len(got) == 1 and got[0][1] is None:
        return conn.build(200, headers, encode_json(generate_response(got[0][0])),
                          keep_alive, http10)
    if got and got[0][1] is not None:  # the first response's error sets the status
        return conn.error_data(got[0][1], keep_alive, http10, headers)
    # Triton's status went with a first response that was no error: 200,
    # and what went wrong after it in the body
    later = [e for _, e in got if e is not None]
    message = str(later[0]) if later else (
        "generate expects model to produce exactly 1 response, use generate stream for model "
        "that generates various number of responses")
    return conn.build(200, headers, error_body(message), keep_alive, http10)
