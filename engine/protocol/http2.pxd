# nghttp2's server session API (Debian's libnghttp2-dev, <nghttp2/nghttp2.h>),
# and the HTTP/2 + gRPC framing classes built on it (engine/protocol/http2.pyx).
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp.string cimport string


cdef extern from "nghttp2/nghttp2.h" nogil:
    ctypedef struct nghttp2_session:
        pass
    ctypedef struct nghttp2_session_callbacks:
        pass
    ctypedef struct nghttp2_option:
        pass

    ctypedef struct nghttp2_nv:
        uint8_t* name
        uint8_t* value
        size_t namelen
        size_t valuelen
        uint8_t flags

    ctypedef struct nghttp2_frame_hd:
        size_t length
        int32_t stream_id
        uint8_t type
        uint8_t flags

    ctypedef struct nghttp2_data:
        nghttp2_frame_hd hd
        size_t padlen

    ctypedef enum nghttp2_headers_category:
        NGHTTP2_HCAT_REQUEST
        NGHTTP2_HCAT_RESPONSE
        NGHTTP2_HCAT_PUSH_RESPONSE
        NGHTTP2_HCAT_HEADERS

    ctypedef struct nghttp2_headers:
        nghttp2_frame_hd hd
        size_t padlen
        nghttp2_headers_category cat

    ctypedef struct nghttp2_rst_stream:
        nghttp2_frame_hd hd
        uint32_t error_code

    ctypedef union nghttp2_frame:
        nghttp2_frame_hd hd
        nghttp2_data data
        nghttp2_headers headers
        nghttp2_rst_stream rst_stream

    ctypedef union nghttp2_data_source:
        int fd
        void* ptr



# nghttp2 calls these back from inside mem_recv/send, which run holding the
# GIL, so they are plain (GIL-holding) function types.
cdef extern from "nghttp2/nghttp2.h":
    ctypedef ssize_t (*nghttp2_data_source_read_callback)(
        nghttp2_session* session, int32_t stream_id, uint8_t* buf, size_t length,
        uint32_t* data_flags, nghttp2_data_source* source, void* user_data)

    ctypedef ssize_t (*nghttp2_send_callback)(
        nghttp2_session* session, const uint8_t* data, size_t length, int flags,
        void* user_data)
    ctypedef int (*nghttp2_send_data_callback)(
        nghttp2_session* session, nghttp2_frame* frame, const uint8_t* framehd,
        size_t length, nghttp2_data_source* source, void* user_data)
    ctypedef int (*nghttp2_on_frame_recv_callback)(
        nghttp2_session* session, const nghttp2_frame* frame, void* user_data)
    ctypedef int (*nghttp2_on_begin_headers_callback)(
        nghttp2_session* session, const nghttp2_frame* frame, void* user_data)
    ctypedef int (*nghttp2_on_header_callback)(
        nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
        size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags,
        void* user_data)
    ctypedef int (*nghttp2_on_data_chunk_recv_callback)(
        nghttp2_session* session, uint8_t flags, int32_t stream_id, const uint8_t* data,
        size_t len, void* user_data)
    ctypedef int (*nghttp2_on_frame_send_callback)(
        nghttp2_session* session, const nghttp2_frame* frame, void* user_data)
    ctypedef int (*nghttp2_on_frame_not_send_callback)(
        nghttp2_session* session, const nghttp2_frame* frame, int lib_error_code,
        void* user_data)
    ctypedef int (*nghttp2_on_stream_close_callback)(
        nghttp2_session* session, int32_t stream_id, uint32_t error_code, void* user_data)


cdef extern from "nghttp2/nghttp2.h" nogil:
    ctypedef struct nghttp2_data_provider:
        nghttp2_data_source source
        nghttp2_data_source_read_callback read_callback

    ctypedef struct nghttp2_settings_entry:
        int32_t settings_id
        uint32_t value

    enum:
        NGHTTP2_DATA
        NGHTTP2_HEADERS
        NGHTTP2_RST_STREAM
        NGHTTP2_SETTINGS
        NGHTTP2_PING
        NGHTTP2_GOAWAY

        NGHTTP2_FLAG_NONE
        NGHTTP2_FLAG_END_STREAM
        NGHTTP2_FLAG_END_HEADERS
        NGHTTP2_FLAG_ACK

        NGHTTP2_NV_FLAG_NONE
        NGHTTP2_NV_FLAG_NO_COPY_NAME
        NGHTTP2_NV_FLAG_NO_COPY_VALUE

        NGHTTP2_DATA_FLAG_NONE
        NGHTTP2_DATA_FLAG_EOF
        NGHTTP2_DATA_FLAG_NO_END_STREAM
        NGHTTP2_DATA_FLAG_NO_COPY

        NGHTTP2_ERR_WOULDBLOCK
        NGHTTP2_ERR_DEFERRED
        NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE
        NGHTTP2_ERR_CALLBACK_FAILURE

        NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS
        NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE
        NGHTTP2_SETTINGS_MAX_FRAME_SIZE
        NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE
        NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES

        NGHTTP2_NO_ERROR
        NGHTTP2_PROTOCOL_ERROR
        NGHTTP2_INTERNAL_ERROR
        NGHTTP2_FLOW_CONTROL_ERROR
        NGHTTP2_REFUSED_STREAM
        NGHTTP2_CANCEL
        NGHTTP2_ENHANCE_YOUR_CALM

    int nghttp2_session_callbacks_new(nghttp2_session_callbacks** callbacks_ptr)
    void nghttp2_session_callbacks_del(nghttp2_session_callbacks* callbacks)
    void nghttp2_session_callbacks_set_send_callback(
        nghttp2_session_callbacks* cbs, nghttp2_send_callback cb)
    void nghttp2_session_callbacks_set_send_data_callback(
        nghttp2_session_callbacks* cbs, nghttp2_send_data_callback cb)
    void nghttp2_session_callbacks_set_on_frame_recv_callback(
        nghttp2_session_callbacks* cbs, nghttp2_on_frame_recv_callback cb)
    void nghttp2_session_callbacks_set_on_begin_headers_callback(
        nghttp2_session_callbacks* cbs, nghttp2_on_begin_headers_callback cb)
    void nghttp2_session_callbacks_set_on_header_callback(
        nghttp2_session_callbacks* cbs, nghttp2_on_header_callback cb)
    void nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
        nghttp2_session_callbacks* cbs, nghttp2_on_data_chunk_recv_callback cb)
    void nghttp2_session_callbacks_set_on_frame_send_callback(
        nghttp2_session_callbacks* cbs, nghttp2_on_frame_send_callback cb)
    void nghttp2_session_callbacks_set_on_frame_not_send_callback(
        nghttp2_session_callbacks* cbs, nghttp2_on_frame_not_send_callback cb)
    void nghttp2_session_callbacks_set_on_stream_close_callback(
        nghttp2_session_callbacks* cbs, nghttp2_on_stream_close_callback cb)

    int nghttp2_option_new(nghttp2_option** option_ptr)
    void nghttp2_option_del(nghttp2_option* option)
    void nghttp2_option_set_max_send_header_block_length(nghttp2_option* option, size_t val)
    void nghttp2_option_set_max_continuations(nghttp2_option* option, size_t val)
    void nghttp2_option_set_no_closed_streams(nghttp2_option* option, int val)

    int nghttp2_session_server_new2(nghttp2_session** session_ptr,
                                    const nghttp2_session_callbacks* callbacks,
                                    void* user_data, const nghttp2_option* option)
    void nghttp2_session_del(nghttp2_session* session)
    ssize_t nghttp2_session_mem_recv(nghttp2_session* session, const uint8_t* data,
                                     size_t datalen)
    int nghttp2_session_send(nghttp2_session* session)
    int nghttp2_session_want_read(nghttp2_session* session)
    int nghttp2_session_want_write(nghttp2_session* session)
    void* nghttp2_session_get_stream_user_data(nghttp2_session* session, int32_t stream_id)
    int nghttp2_session_set_stream_user_data(nghttp2_session* session, int32_t stream_id,
                                             void* stream_user_data)
    int nghttp2_session_resume_data(nghttp2_session* session, int32_t stream_id)
    int32_t nghttp2_session_get_last_proc_stream_id(nghttp2_session* session)
    int nghttp2_session_set_local_window_size(nghttp2_session* session, uint8_t flags,
                                              int32_t stream_id, int32_t window_size)
    uint32_t nghttp2_session_get_remote_settings(nghttp2_session* session, int id)

    int nghttp2_submit_settings(nghttp2_session* session, uint8_t flags,
                                const nghttp2_settings_entry* iv, size_t niv)
    int nghttp2_submit_response(nghttp2_session* session, int32_t stream_id,
                                const nghttp2_nv* nva, size_t nvlen,
                                const nghttp2_data_provider* data_prd)
    int nghttp2_submit_trailer(nghttp2_session* session, int32_t stream_id,
                               const nghttp2_nv* nva, size_t nvlen)
    int nghttp2_submit_rst_stream(nghttp2_session* session, uint8_t flags, int32_t stream_id,
                                  uint32_t error_code)
    int nghttp2_submit_ping(nghttp2_session* session, uint8_t flags, const uint8_t* opaque_data)
    int nghttp2_submit_goaway(nghttp2_session* session, uint8_t flags, int32_t last_stream_id,
                              uint32_t error_code, const uint8_t* opaque_data,
                              size_t opaque_data_len)
    const char* nghttp2_strerror(int lib_error_code)


cdef extern from "<string_view>" namespace "std" nogil:
    cdef cppclass string_view:
        string_view(const char* data, size_t size)


cdef extern from "pyserver/protocol/grpc_codec.h" namespace "pyserver::grpc" nogil:
    int64_t ParseGrpcTimeoutUs(string_view value)
    string PercentEncode(string_view message)


cdef class Connection


cdef class WriteBatch:
    cdef object call_soon   # the event loop's
    cdef bint scheduled     # flush() is queued on the loop
    cdef list waiting       # connections whose writes wait for flush()

    cdef int hold(self, Connection conn) except -1


cdef class Stream:
    cdef readonly int32_t id
    cdef readonly Connection connection
    cdef readonly object route          # what the connection's routes map the path to
    cdef readonly bytes path
    cdef readonly list headers          # [(name, value)] beyond the gRPC ones, when captured
    cdef readonly bytes encoding        # grpc-encoding, or None
    cdef bint accepts_gzip              # grpc-accept-encoding lists gzip
    cdef bint gzip_out                  # responses go out gzip-compressed
    cdef readonly bint half_closed      # the client sent END_STREAM
    cdef readonly bint closed           # the HTTP/2 stream is gone (done or reset)
    cdef readonly bint finished         # our final status was submitted
    cdef readonly uint32_t reset_code   # the HTTP/2 error code it closed with
    cdef public object cancel_callback  # called with no arguments if closed before finished
    cdef public object data             # free for the frontend's own state
    cdef readonly uint64_t opened_ns    # when its headers began to arrive (engine clock)
    cdef int64_t timeout_us
    cdef bint method_ok
    cdef bint content_type_ok
    cdef size_t header_bytes
    # receiving: the message in progress, and a unary call's one message
    cdef uint8_t prefix[5]
    cdef int prefix_fill
    cdef bint msg_compressed
    cdef object msg                     # bytes filled in place
    cdef size_t msg_len
    cdef size_t msg_fill
    cdef object first_message
    cdef int messages
    # sending
    cdef bint headers_sent
    cdef bint deferred
    cdef list outq
    cdef size_t out_pos
    cdef size_t out_bytes
    # written-message notices: (queued bytes when the message ends, callback)
    cdef list sent_marks
    cdef uint64_t queued_total
    cdef uint64_t sent_total
    cdef bint finishing
    cdef int status
    cdef bytes status_message

    cpdef bint respond(self, bytes payload, bint framed=*) except -1
    cdef int _submit_headers(self, bint with_data) except -1
    cdef int _submit_trailers(self) except -1
    cdef int _append(self, object payload) except -1
    cdef int _append_message(self, bytes payload, bint framed) except -1
    cdef size_t _copy_out(self, string* out, size_t n) except? 0
    cdef int _release(self) except -1
    cdef int _notify_sent(self, bint every) except -1
    cdef int _wake(self) except -1


cdef class Connection:
    cdef nghttp2_session* session
    cdef object transport
    cdef readonly dict routes
    cdef readonly bint capture_headers
    cdef readonly size_t max_message_size
    cdef readonly size_t max_header_list_size
    cdef readonly int response_compression  # zlib level for gzip responses; 0: none
    cdef readonly int open_streams
    cdef readonly size_t pending_bytes  # response bytes not yet handed to the transport
    cdef set streams
    cdef object on_open
    cdef object on_close
    cdef string outbuf
    cdef bint in_recv
    cdef bint blocked
    cdef bint write_paused
    cdef bint read_paused
    cdef bint goaway_sent
    cdef bint close_after_flush  # goaway() inside a receive callback: close once written
    # HEADERS and DATA frames sent so far: the keepalive policy reads it to
    # tell whether the transport carried calls between two pings.
    cdef readonly uint64_t frames_sent
    # a grpc_keepalive.ConnectionKeepalive, or None: told of PING frames
    cdef public object keepalive
    # while it is open, flushes wait for its end (one write for many answers)
    cdef public WriteBatch write_batch
    cdef bint flush_waiting

    cdef int _close_transport(self) except -1
    cdef int _teardown(self) except -1
    cdef int _stream_closed(self, Stream stream, uint32_t error_code) except -1
    cdef int _update_reading(self) except -1
    cdef int _flush(self) except -1
    cdef int _write_out(self) except -1
    cdef size_t _status_message_limit(self)
    cdef int _handler_failed(self, Stream stream, object exc) except -1
    cdef int _stream_error(self, Stream stream, int status, str message) except -1
    cdef int _http_error(self, Stream stream, const char* status) except -1
    cdef int _headers_done(self, Stream stream) except -1
    cdef int _data(self, Stream stream, const uint8_t* data, size_t n) except -1
    cdef int _message_done(self, Stream stream) except -1
    cdef object _decompress(self, Stream stream, bytes msg)
    cdef int _end_of_stream(self, Stream stream) except -1
