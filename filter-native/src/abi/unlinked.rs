//! Stand-ins for the stream callbacks Envoy exports, so that the unit tests link: a test
//! binary has no Envoy to resolve them. The tests never reach one (they run hooks with no
//! Envoy filter and nothing for Envoy to do); one that did would abort.
#![allow(unsafe_code)]

macro_rules! unlinked {
    ($($name:ident),* $(,)?) => {
        $(
            #[unsafe(no_mangle)]
            extern "C" fn $name() {
                std::process::abort();
            }
        )*
    };
}

unlinked!(
    envoy_dynamic_module_callback_http_filter_config_decrement_gauge,
    envoy_dynamic_module_callback_http_filter_config_define_counter,
    envoy_dynamic_module_callback_http_filter_config_define_gauge,
    envoy_dynamic_module_callback_http_filter_config_http_callout,
    envoy_dynamic_module_callback_http_filter_config_increment_counter,
    envoy_dynamic_module_callback_http_filter_config_increment_gauge,
    envoy_dynamic_module_callback_http_filter_config_scheduler_commit,
    envoy_dynamic_module_callback_http_filter_config_scheduler_delete,
    envoy_dynamic_module_callback_http_filter_config_scheduler_new,
    envoy_dynamic_module_callback_http_filter_continue_decoding,
    envoy_dynamic_module_callback_http_filter_continue_encoding,
    envoy_dynamic_module_callback_http_filter_decrement_gauge,
    envoy_dynamic_module_callback_http_filter_get_attribute_int,
    envoy_dynamic_module_callback_http_filter_get_attribute_string,
    envoy_dynamic_module_callback_http_filter_http_callout,
    envoy_dynamic_module_callback_http_filter_increment_counter,
    envoy_dynamic_module_callback_http_filter_increment_gauge,
    envoy_dynamic_module_callback_http_filter_scheduler_commit,
    envoy_dynamic_module_callback_http_filter_scheduler_delete,
    envoy_dynamic_module_callback_http_filter_scheduler_new,
    envoy_dynamic_module_callback_http_get_body_chunks,
    envoy_dynamic_module_callback_http_get_body_chunks_size,
    envoy_dynamic_module_callback_http_get_body_size,
    envoy_dynamic_module_callback_http_get_header,
    envoy_dynamic_module_callback_http_get_headers,
    envoy_dynamic_module_callback_http_get_headers_size,
    envoy_dynamic_module_callback_http_received_buffered_request_body,
    envoy_dynamic_module_callback_http_received_buffered_response_body,
    envoy_dynamic_module_callback_http_send_response,
    envoy_dynamic_module_callback_http_set_header,
    envoy_dynamic_module_callback_log,
);
