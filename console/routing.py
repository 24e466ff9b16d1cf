"""WebSocket routes: the live model overview and the home dashboard (jobs/live/consumers.py
documents who may connect and the close codes)."""

from django.urls import path

from jobs.live.consumers import ApplicationConsumer, DashboardConsumer

websocket_urlpatterns: list = [
    path("ws/applications/<slug:name>/", ApplicationConsumer.as_asgi()),
    path("ws/dashboard/", DashboardConsumer.as_asgi()),
]
