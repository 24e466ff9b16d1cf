from django.urls import path

from models_catalog import views

app_name = "models_catalog"
urlpatterns = [
    path("check/", views.check, name="check"),
    path("masters/", views.masters, name="masters"),
    path("masters/add/", views.master_add, name="master-add"),
    path("masters/recommended/", views.master_from_recommended, name="master-recommended"),
    path("masters/recipe/", views.master_from_recipe_view, name="master-recipe"),
    path("masters/<str:slug>/", views.master_edit, name="master-edit"),
    path("masters/<str:slug>/delete/", views.master_delete, name="master-delete"),
]
