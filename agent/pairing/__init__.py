"""Pairing: how a daemon enrols this agent, and what that leaves on disk.

    service.py     PairingService: the code shown, single-use challenges, the daemon's proof checked
    server.py      the HTTP app of an unpaired agent: only the pairing routes
    enrollment.py  the identity files pairing writes, is_paired, and the TLS contexts before and after

The protocol (models, proofs, the code format) is in ``agent.api.pairing``.
"""
