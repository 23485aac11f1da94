from collections.abc import Callable
from typing import Any

def requests_in(items: list | bytes, mm: Any, dtypes: dict, copy: bool,
                request_class: type, make_trace: Callable,
                model_name: str, model_version: Any) -> list: ...


def answers_fit(responses: Any, requests: list, reschedule_flags: int) -> bool: ...


def responses_out(responses: list, requests: list, region: Any, offset: int,
                  bytes_code: int, reschedule_flags: int, again: tuple, missing: str,
                  bytes_array: Callable) -> tuple[int, list | bytes]: ...
