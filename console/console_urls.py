from django.urls import path

from console import views

app_name = "console"
urlpatterns = [
    path("", views.home, name="home"),
    path("organization/switch/", views.switch_organization, name="switch-organization"),
]
