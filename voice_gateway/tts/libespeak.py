"""ctypes binding of libespeak-ng (the Debian package libespeak-ng1, which the espeak-ng
program is linked against): the few functions of its speak_lib.h API that
tts/espeak_engine.py uses.

Signatures and values are from espeak-ng 1.51's speak_lib.h. The synthesis flags are those of
the `espeak-ng` command line (espeakCHARS_AUTO | espeakPHONEMES | espeakENDPAUSE: no SSML, as
without its -m option), so the library speaks exactly what `espeak-ng -v VOICE -s SPEED
--stdout` speaks (tests/unit/test_tts_espeak.py compares the samples).
"""

from __future__ import annotations

import ctypes
import re

AUDIO_OUTPUT_SYNCHRONOUS = 2  # espeak_AUDIO_OUTPUT: espeak_Synth runs on the calling thread
POS_CHARACTER = 1  # espeak_POSITION_TYPE
ESPEAK_RATE = 1  # espeak_PARAMETER espeakRATE (words per minute)
EE_OK = 0
INITIALIZE_DONT_EXIT = 0x8000  # a missing espeak-ng-data must not exit() the gateway
SYNTH_FLAGS = 0x0 | 0x100 | 0x1000  # espeakCHARS_AUTO | espeakPHONEMES | espeakENDPAUSE
LIBRARY_NAMES = ("libespeak-ng.so.1", "libespeak-ng.so", "libespeak-ng.dylib")


class EspeakVoice(ctypes.Structure):
    """espeak_VOICE, for espeak_SetVoiceByProperties (a language such as "en-us")."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("languages", ctypes.c_char_p),
        ("identifier", ctypes.c_char_p),
        ("gender", ctypes.c_ubyte),
        ("age", ctypes.c_ubyte),
        ("variant", ctypes.c_ubyte),
        ("xx1", ctypes.c_ubyte),
        ("score", ctypes.c_int),
        ("spare", ctypes.c_void_p),
    ]


# int callback(short *wav, int numsamples, espeak_EVENT *events): 0 = go on, 1 = stop.
# The events are not read, so they stay an opaque pointer.
SynthCallback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)


def load_library(names: tuple[str, ...] | None = None) -> ctypes.CDLL | None:
    """The library (the first of `names` found, LIBRARY_NAMES by default) with its prototypes
    declared, or None when it is not installed."""
    for name in names or LIBRARY_NAMES:
        try:
            lib = ctypes.CDLL(name)  # a CDLL call releases the GIL while espeak runs
        except OSError:
            continue
        c_int, c_char_p = ctypes.c_int, ctypes.c_char_p
        lib.espeak_Initialize.argtypes = [c_int, c_int, c_char_p, c_int]
        lib.espeak_Initialize.restype = c_int
        lib.espeak_SetSynthCallback.argtypes = [SynthCallback]
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_SetVoiceByName.argtypes = [c_char_p]
        lib.espeak_SetVoiceByName.restype = c_int
        lib.espeak_SetVoiceByProperties.argtypes = [ctypes.POINTER(EspeakVoice)]
        lib.espeak_SetVoiceByProperties.restype = c_int
        lib.espeak_SetParameter.argtypes = [c_int, c_int, c_int]
        lib.espeak_SetParameter.restype = c_int
        lib.espeak_Synth.argtypes = [
            ctypes.c_char_p,  # const void *text (NUL-terminated UTF-8)
            ctypes.c_size_t,  # size (with the NUL)
            ctypes.c_uint,  # position
            c_int,  # espeak_POSITION_TYPE
            ctypes.c_uint,  # end_position (0: to the end)
            ctypes.c_uint,  # flags
            ctypes.POINTER(ctypes.c_uint),  # unique_identifier (NULL)
            ctypes.c_void_p,  # user_data
        ]
        lib.espeak_Synth.restype = c_int
        return lib
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """A NUL would end the text early (and cannot be a program argument), a lone surrogate
    cannot be encoded: both become spaces, for the library and the program alike."""
    return _SURROGATE.sub(" ", text.replace("\0", " "))


def encode_text(text: str) -> bytes:
    """UTF-8 with the terminating NUL espeak_Synth expects."""
    return clean_text(text).encode("utf-8") + b"\0"
