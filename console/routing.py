"""WebSocket routes; the model overview's live status joins here in a later change."""

websocket_urlpatterns: list = []
