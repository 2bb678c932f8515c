:: conda-build runs this file (its default build script on win); the steps are v1's, shared through the
:: source's `recipe` folder (meta.yaml).
call recipe\build.bat
if errorlevel 1 exit 1
