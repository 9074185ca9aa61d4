"""Code mode's runner: runs one script whose tool functions call back to the agent.

It runs inside the skills sandbox (one container per script). Frames are one JSON object per
line: to the agent on the original stdout, from the agent on the original stdin. The script's
own stdout and stderr (print) are sent as {"print": text} frames; a tool call is
{"call": {"name": tool, "arguments": {...}}}, answered by {"ok": true, "value": v} or
{"ok": false, "kind": k, "message": m}; the end is {"done": {"error": text or null, "answer": text or null}} (answer: what the
script gave final_answer()).
"""
import io
import _thread
import json
import os
import sys
import time


def _channels():
    # Frames get private descriptors; fd 1 then points at stderr and fd 0 at /dev/null, so a
    # stray write to fd 1 or read from fd 0 (input(), a C library) cannot tear a frame.
    out_fd, in_fd = os.dup(1), os.dup(0)
    os.dup2(2, 1)
    nul = os.open("/dev/null", os.O_RDONLY)
    os.dup2(nul, 0)
    os.close(nul)
    return os.fdopen(in_fd, "rb"), os.fdopen(out_fd, "wb")


_IN, _OUT = _channels()
# One frame, or one call and its answer, at a time: a script's threads may call tools too.
_LOCK = _thread.allocate_lock()


def _send(frame):
    line = json.dumps(frame, ensure_ascii=False).encode("utf-8", "replace") + b"\n"
    with _LOCK:
        _OUT.write(line)
        _OUT.flush()


class _Printed(io.TextIOBase):
    """sys.stdout and sys.stderr of the script: text goes to the agent in frames."""

    def __init__(self):
        self._parts = []
        self._size = 0
        self._last = time.monotonic()

    def writable(self):
        return True

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not " + type(s).__name__)
        self._parts.append(s)
        self._size += len(s)
        if self._size >= 4096 or ("\n" in s and time.monotonic() - self._last >= 0.05):
            self.flush()
        return len(s)

    def flush(self):
        if self._parts:
            text = "".join(self._parts)
            self._parts = []
            self._size = 0
            self._last = time.monotonic()
            _send({"print": text})


class ToolError(Exception):
    """A tool call failed. `tool` is the tool, `kind` why, `message` what it said."""

    kind = "failed"

    def __init__(self, tool, message, kind=None):
        super().__init__(message)
        self.tool = tool
        self.message = message
        if kind is not None:
            self.kind = kind

    def __str__(self):
        return "%s: %s" % (self.tool, self.message)


class ToolTimeout(ToolError):
    """The call ran past the tool's time limit and was stopped."""

    kind = "timeout"


class InvalidArguments(ToolError):
    """The arguments did not fit the tool's parameters; the tool did not run."""

    kind = "invalid_arguments"


class ToolNotFound(ToolError):
    """No tool by that name."""

    kind = "not_found"


class ToolUnavailable(ToolError):
    """The tool's service is not reachable now."""

    kind = "unavailable"


class ToolCrashed(ToolError):
    """The tool crashed."""

    kind = "crashed"


class ResultTooLarge(ToolError):
    """The result passed the size cap; `partial` holds its capped text."""

    kind = "result_too_large"

    def __init__(self, tool, message, partial=""):
        super().__init__(tool, message)
        self.partial = partial


class ApprovalRequired(ToolError):
    """The call needs a person's approval: call the tool directly, not from a script."""

    kind = "approval_required"


class CallLimitExceeded(ToolError):
    """The script made as many tool calls as it may."""

    kind = "call_limit"


_ERRORS = {
    c.kind: c
    for c in (
        ToolError,
        ToolTimeout,
        InvalidArguments,
        ToolNotFound,
        ToolUnavailable,
        ToolCrashed,
        ResultTooLarge,
        ApprovalRequired,
        CallLimitExceeded,
    )
}


def _call(tool, arguments):
    sys.stdout.flush()
    try:
        frame = json.dumps({"call": {"name": tool, "arguments": arguments}}, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise InvalidArguments(tool, "the arguments are not JSON: %s" % e) from None
    with _LOCK:
        _OUT.write(frame.encode("utf-8", "replace") + b"\n")
        _OUT.flush()
        line = _IN.readline()
    if not line:
        os._exit(70)
    reply = json.loads(line)
    if reply.get("ok"):
        return reply.get("value")
    kind = reply.get("kind", "failed")
    message = reply.get("message", "")
    if kind == "result_too_large":
        raise ResultTooLarge(tool, message, reply.get("partial", ""))
    raise _ERRORS.get(kind, ToolError)(tool, message, kind)


class _FinalAnswer(BaseException):
    """Raised by final_answer() to end the script; not an Exception, so `except Exception`
    in the script does not stop it."""


_ANSWER = []


def final_answer(answer):
    """Ends the script: `answer` (text, or any JSON value) is the reply to the user as it is,
    with no further step. Only the first call counts."""
    if not _ANSWER:
        if not isinstance(answer, str):
            answer = json.dumps(answer, ensure_ascii=False, default=str)
        _ANSWER.append(answer)
    raise _FinalAnswer()


def _function(spec):
    name = spec["name"]
    tool = spec["tool"]
    params = spec.get("params", [])
    required = set(spec.get("required", []))
    by_dict = spec.get("dict", False)

    def function(*args, **kwargs):
        if by_dict:
            if kwargs or len(args) > 1 or (args and not isinstance(args[0], dict)):
                raise TypeError("%s() takes one dict of arguments" % name)
            arguments = dict(args[0]) if args else {}
        else:
            if len(args) > len(params):
                raise TypeError(
                    "%s() takes at most %d positional arguments (%d given)"
                    % (name, len(params), len(args))
                )
            arguments = {}
            for key, value in zip(params, args):
                arguments[key] = value
            for key, value in kwargs.items():
                if key in arguments:
                    raise TypeError("%s() got multiple values for argument %r" % (name, key))
                arguments[key] = value
            # None for an optional parameter means: leave it out.
            arguments = {
                k: v for k, v in arguments.items() if not (v is None and k not in required)
            }
        return _call(tool, arguments)

    function.__name__ = name
    function.__qualname__ = name
    function.__doc__ = spec.get("doc", "")
    return function


def _where(error):
    """The script's part of a traceback: its own lines only, then the error."""
    import traceback  # only when a script fails: a few milliseconds of start-up otherwise

    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == "<script>"]
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.format_list(frames)
    lines += traceback.format_exception_only(type(error), error)
    return "".join(lines)


def main():
    request = json.loads(_IN.readline() or "{}")
    printed = _Printed()
    sys.stdout = printed
    sys.stderr = printed
    names = {
        "__name__": "__main__",
        "__builtins__": __builtins__,
        "json": json,
    }
    for cls in _ERRORS.values():
        names[cls.__name__] = cls
    if request.get("final_answer"):
        names["final_answer"] = final_answer
    for spec in request.get("functions", []):
        names[spec["name"]] = _function(spec)
    error = None
    try:
        code = compile(request.get("code", ""), "<script>", "exec")
        exec(code, names)
    except _FinalAnswer:
        pass
    except SystemExit as e:
        if e.code not in (None, 0):
            error = "SystemExit: %s" % (e.code,)
    except BaseException as e:  # the script's own errors, reported to the model
        error = _where(e)
    printed.flush()
    _send({"done": {"error": error, "answer": _ANSWER[0] if _ANSWER else None}})
    _OUT.close()
    os._exit(0)


main()
