"""Native WebRTC calls (docs/webrtc.md): signalling in routes/webrtc.py, the peer connection
as a `Transport` (transport.py), paced reply audio (media.py), ICE policy (ice.py)."""
