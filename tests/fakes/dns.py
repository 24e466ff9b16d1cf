"""A small DNS server on loopback for TXT queries: names it knows answer their TXT values,
names marked silent get no answer at all (the client times out), every other name is NXDOMAIN.
dnspython parses the queries and builds the answers; the socket is real UDP."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset


class FakeDNS:
    def __init__(self) -> None:
        self.txt: dict[str, list[str]] = {}
        self.silent: set[str] = set()
        self.queries: list[str] = []
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.settimeout(0.1)
        self.address = self._socket.getsockname()
        self._stop = threading.Event()

    def publish(self, name: str, *values: str) -> None:
        self.txt[name.rstrip(".").lower()] = list(values)

    def _answer(self, wire: bytes) -> bytes | None:
        query = dns.message.from_wire(wire)
        question = query.question[0]
        name = question.name.to_text().rstrip(".").lower()
        self.queries.append(name)
        if name in self.silent:
            return None
        response = dns.message.make_response(query)
        if name not in self.txt:
            response.set_rcode(dns.rcode.NXDOMAIN)
        elif question.rdtype == dns.rdatatype.TXT:
            quoted = [f'"{v}"' for v in self.txt[name]]
            if quoted:
                response.answer.append(
                    dns.rrset.from_text_list(question.name, 60, dns.rdataclass.IN, "TXT", quoted)
                )
        return response.to_wire()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                wire, peer = self._socket.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                reply = self._answer(wire)
            except Exception:  # noqa: BLE001 - a query it cannot parse gets no answer
                reply = None
            if reply is not None:
                self._socket.sendto(reply, peer)

    @contextlib.contextmanager
    def serve(self) -> Iterator[FakeDNS]:
        thread = threading.Thread(target=self._serve, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(timeout=5)
            self._socket.close()
